"""Pure codecs of Kafka's on-disk format: bytes in, values out; no files, clocks or config."""
