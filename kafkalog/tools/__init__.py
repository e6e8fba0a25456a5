"""Drivers-side tools over the log layer: dump (kafka-dump-log), verify, demo."""
