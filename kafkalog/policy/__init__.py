"""Pure planners over immutable snapshots: retention now, compaction selection later. No I/O, no clock."""
