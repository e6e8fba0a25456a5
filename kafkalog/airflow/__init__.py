"""kafkalog as an Airflow provider: the ``kafkalog`` connection type (a log store), its hook, the
maintenance operators, lineage and the Log store page's data.

Importing this package imports nothing heavy: Airflow reads ``get_provider_info`` from every
component at start.
"""
