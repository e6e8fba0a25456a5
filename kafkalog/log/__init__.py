"""Files on disk: segments, indexes, checkpoints, config, locking and the log store."""
