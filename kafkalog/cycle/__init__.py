"""A cleanup cycle's steps and documents, without Airflow: ``steps`` (scan, plan retention for a shard,
mark it, sweep, select logs to clean, summarise), ``plans`` (the retention and compaction plan
documents and the functions that make and carry them out) and ``spark`` (spark-submit settings for the
compaction job). The CLI, the DAGs' tasks (through ``kafkalog.airflow``) and the Spark job call these
same functions, so a cycle and the CLI with the same clock write the same bytes.
"""
