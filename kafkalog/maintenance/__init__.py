"""Executors that carry out plans (mark deleted, sweep, compact), each idempotent and journalled."""
