"""Run one DAG run with Airflow's own in-process runner (``dag.test()``: mapped tasks, deferrals and
retries included) and print its outcome as a ``RESULT {json}`` line. Run by the tests as a
subprocess, so that Airflow's configuration (AIRFLOW_HOME, folders) stays out of the test process.

    python dag_test_runner.py DAG_ID LOGICAL_MS CONF_JSON
"""

from __future__ import annotations

import datetime
import json
import os
import sys

from airflow.dag_processing.dagbag import DagBag


def main() -> None:
    dag_id, logical_ms, conf = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    assert not bag.import_errors, bag.import_errors
    logical = datetime.datetime.fromtimestamp(logical_ms / 1000, tz=datetime.UTC)
    run = bag.dags[dag_id].test(logical_date=logical, run_conf=conf)
    instances = {(ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"): ti
                 for ti in run.get_task_instances()}
    tasks = {name: str(ti.state) for name, ti in instances.items()}
    tries = {name: ti.try_number for name, ti in instances.items()}
    print("RESULT " + json.dumps({"state": str(run.state), "run_id": run.run_id, "tasks": tasks, "tries": tries}))


if __name__ == "__main__":
    main()
