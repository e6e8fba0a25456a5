"""kafkalog: a Kafka-format commit-log store with Kafka's retention and compaction.

Layers (imports point down only): ``format`` (bytes in, values out) → ``log`` (files: segments,
indexes, checkpoints, config, the store) → ``tools``/``cli`` (drivers).
"""

__version__ = "0.1.0"
