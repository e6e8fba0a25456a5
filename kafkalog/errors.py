"""The one exception tree of kafkalog.

Every error kafkalog raises on bad input derives from :class:`KafkaLogError`, so a driver (the CLI,
an Airflow task, the Spark job) can catch one type, print one line and exit non-zero. Messages name
the file, the byte position or offset, the bad value and, where there is one, the fix.
"""

from __future__ import annotations


class KafkaLogError(Exception):
    """Root of every kafkalog error."""


class CorruptRecordError(KafkaLogError):
    """A batch or record fails its size, magic or CRC check (Kafka's CorruptRecordException)."""


class InvalidRecordError(KafkaLogError):
    """A batch is well framed but its records do not parse (Kafka's InvalidRecordException)."""


class CompressionError(InvalidRecordError):
    """A compressed payload cannot be decoded, or a codec is not usable here."""


class CorruptIndexError(KafkaLogError):
    """An index file fails its sanity check (Kafka's CorruptIndexException)."""


class InvalidOffsetError(KafkaLogError):
    """An offset goes backwards where Kafka requires it to increase (InvalidOffsetException)."""


class OffsetOverflowError(KafkaLogError):
    """An offset does not fit in a segment's 32-bit relative offset (LogSegmentOffsetOverflowException);
    ``segment_base`` names the segment where it was found in one already written."""

    def __init__(self, message: str, segment_base: int | None = None) -> None:
        super().__init__(message)
        self.segment_base = segment_base


class RecordBatchTooLargeError(KafkaLogError):
    """A batch is larger than the segment may hold (RecordBatchTooLargeException)."""


class ConfigError(KafkaLogError):
    """A config key is unknown or its value is out of range; the message names the key."""


class InvalidTopicError(KafkaLogError):
    """A topic name Kafka would reject, or a topic/partition that does not exist."""


class UnknownFileError(KafkaLogError):
    """A file in a log or partition directory that Kafka's layout does not explain."""


class LogLockedError(KafkaLogError):
    """Another process holds the lock of a partition (or log dir) that this operation needs."""


class LogDirError(KafkaLogError):
    """A log directory is missing, unreadable, or unsafe (e.g. a symlink leading outside it)."""


class CleanerError(KafkaLogError):
    """Compaction of a partition failed or its output did not verify; nothing was swapped."""
