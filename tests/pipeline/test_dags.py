"""The DAG folder as Airflow's DagBag parses it: no import errors, nothing heavy imported, the shape,
schedule, retries and params of ``pipeline.md``. Parsed in a subprocess with its own AIRFLOW_HOME."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import airflow_env

pytestmark = [pytest.mark.airflow]  # DagBag parses in a subprocess with an Airflow home of its own

PARSE = r'''
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.definitions.param import ParamsDict
bag = DagBag(dag_folder=sys.argv[1])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "pyspark", "numpy"))
out = {"errors": {k: v[-500:] for k, v in bag.import_errors.items()}, "heavy": heavy, "dags": {}}
for dag_id, dag in bag.dags.items():
    tasks = {}
    for t in dag.tasks:
        tasks[t.task_id] = {"upstream": sorted(t.upstream_task_ids),
                            "trigger_rule": getattr(t.trigger_rule, "value", t.trigger_rule), "retries": t.retries,
                            "backoff": t.retry_exponential_backoff, "doc": bool(t.doc_md),
                            "owner": t.owner, "queue": t.queue, "timeout": None if t.execution_timeout is None else
                            t.execution_timeout.total_seconds(),
                            "mapped": bool(getattr(t, "is_mapped", False)) or "Mapped" in type(t).__name__}
    refused = {}
    for name, value in json.loads(sys.argv[2]).items():
        params = ParamsDict(dag.params)
        try:
            params[name] = value
            params.validate()
            refused[name] = None
        except Exception as exc:
            refused[name] = type(exc).__name__
    out["dags"][dag_id] = {"tasks": tasks, "schedule": str(dag.schedule), "catchup": dag.catchup,
                           "max_active_runs": dag.max_active_runs, "tags": sorted(dag.tags), "doc": bool(dag.doc_md),
                           "params": sorted(dag.params), "refused": refused,
                           "store": dag.params.get_param("store").schema.get("enum")}
print("RESULT " + json.dumps(out))
'''
BAD_VALUES = {"store": "another_store", "topics": "events", "log_dirs": ["relative/dir"], "dry_run": "yes",
              "wall_now_ms": -1, "config_file": 5}


def _parse(env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", PARSE, env["AIRFLOW__CORE__DAGS_FOLDER"], json.dumps(BAD_VALUES)],
                          env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT "):])
    return result


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("parse")
    (home / "broker.properties").write_text("log.retention.check.interval.ms=120000\n")
    return _parse(airflow_env(home, KAFKALOG_CONFIG=str(home / "broker.properties"),
                              KAFKALOG_LOG_DIRS="/data/a,/data/b"))


def test_each_configured_store_has_its_cleanup_dag_with_its_schedule_and_queue(tmp_path: Path) -> None:
    (tmp_path / "b.properties").write_text("log.retention.check.interval.ms=60000\n")
    (tmp_path / "c.properties").write_text("log.retention.check.interval.ms=oops\n")
    env = airflow_env(tmp_path, AIRFLOW__KAFKALOG__STORES="kafkalog_default, store_b,store-c",
                      AIRFLOW_CONN_STORE_B=json.dumps({"conn_type": "kafkalog", "extra": {
                          "log_dirs": "/never/read", "config_file": str(tmp_path / "b.properties"),
                          "queue": "host-b"}}),
                      AIRFLOW_CONN_STORE_C=json.dumps({"conn_type": "kafkalog", "extra": {
                          "config_file": str(tmp_path / "c.properties")}}))
    env.pop("KAFKALOG_CONFIG", None)
    parsed = _parse(env)
    assert parsed["errors"] == {} and parsed["heavy"] == []
    dags = parsed["dags"]
    assert sorted(dags) == ["kafkalog_cleanup", "kafkalog_cleanup__store-c", "kafkalog_cleanup__store_b",
                            "kafkalog_compact"]
    assert dags["kafkalog_cleanup"]["schedule"] == "0:05:00"  # Kafka's default: no broker file
    assert dags["kafkalog_cleanup__store_b"]["schedule"] == "0:01:00"  # its own broker file's interval
    # A broker file that cannot be read when parsed leaves Kafka's default, not a broken DAG folder.
    assert dags["kafkalog_cleanup__store-c"]["schedule"] == "0:05:00"
    assert {t["queue"] for t in dags["kafkalog_cleanup__store_b"]["tasks"].values()} == {"host-b"}
    assert {t["queue"] for t in dags["kafkalog_cleanup"]["tasks"].values()} == {"default"}
    assert dags["kafkalog_cleanup__store_b"]["store"] == ["store_b"]  # a store's DAG maintains only it
    assert dags["kafkalog_compact"]["store"] == ["kafkalog_default", "store_b", "store-c"]
    assert "store:store_b" in dags["kafkalog_cleanup__store_b"]["tags"]


def test_the_dag_folder_imports_without_errors_or_heavy_modules(parsed: dict[str, Any]) -> None:
    assert parsed["errors"] == {}
    assert sorted(parsed["dags"]) == ["kafkalog_cleanup", "kafkalog_compact"]
    assert parsed["heavy"] == []  # neither numba nor pyspark (nor numpy) at parse time


def test_the_cleanup_dag_has_the_documented_shape(parsed: dict[str, Any]) -> None:
    dag = parsed["dags"]["kafkalog_cleanup"]
    upstream = {task: info["upstream"] for task, info in dag["tasks"].items()}
    assert upstream == {
        "scan_partitions": [], "plan_retention": ["scan_partitions"], "mark_deleted": ["plan_retention"],
        "wait_file_delete_delay": ["mark_deleted"], "delete_marked": ["wait_file_delete_delay"],
        "select_dirtiest_logs": ["mark_deleted", "scan_partitions"], "compact": ["select_dirtiest_logs"],
        "report": ["compact", "delete_marked"]}
    tasks = dag["tasks"]
    assert tasks["plan_retention"]["mapped"] and tasks["mark_deleted"]["mapped"]
    assert tasks["report"]["trigger_rule"] == "all_done" and tasks["report"]["retries"] == 0
    assert all(t["retries"] >= 1 and t["backoff"] == 2.0 for name, t in tasks.items() if name != "report")
    assert {n: (t["doc"], t["owner"]) for n, t in tasks.items()} == {n: (True, "kafkalog") for n in tasks}
    assert all(t["timeout"] for name, t in tasks.items() if name != "wait_file_delete_delay")
    assert dag["schedule"] == "0:02:00"  # log.retention.check.interval.ms of the broker file
    assert dag["catchup"] is False and dag["max_active_runs"] == 1 and dag["doc"]
    assert dag["tags"] == ["kafka", "kafkalog", "maintenance", "store:kafkalog_default"]
    assert dag["params"] == ["config_file", "dry_run", "log_dirs", "store", "topics", "wall_now_ms"]


def test_the_trigger_form_refuses_bad_params(parsed: dict[str, Any]) -> None:
    for dag_id in ("kafkalog_cleanup", "kafkalog_compact"):
        refused = parsed["dags"][dag_id]["refused"]
        assert refused == {name: "ParamValidationError" for name in BAD_VALUES}, (dag_id, refused)


def test_the_compact_dag_is_manual_and_asks_for_a_topic(parsed: dict[str, Any]) -> None:
    dag = parsed["dags"]["kafkalog_compact"]
    assert dag["schedule"] == "None"
    assert {t: i["upstream"] for t, i in dag["tasks"].items()} == {
        "plan_compaction": [], "compact": ["plan_compaction"], "report": ["compact"]}
    assert "topic" in dag["params"] and "partitions" in dag["params"]


def test_the_dags_do_not_depend_on_the_working_directory() -> None:
    for path in Path(__file__).resolve().parents[2].joinpath("dags").glob("*.py"):
        text = path.read_text()
        assert "os.getcwd" not in text and "open(" not in text, path.name
