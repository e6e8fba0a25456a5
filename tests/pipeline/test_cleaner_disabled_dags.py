"""Both DAGs with ``log.cleaner.enable=false`` in the broker file, run by Airflow's own runner (``dag.test()``
in a subprocess with its own AIRFLOW_HOME): a cleanup cycle retains only the topics that are not compacted
and compacts nothing (its ``compact`` task is skipped, so Spark never starts), its report names the key;
``kafkalog_compact`` is refused at its plan, naming the key, with nothing changed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import tree_digest
from helpers import NO_COMPACTION, NO_RETENTION, OFF, REFUSED, dag_test, migrated_env
from synthetic import CHANGELOG, EVENTS, SESSIONS, build_store

pytestmark = [pytest.mark.airflow, pytest.mark.slow]



@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return migrated_env(tmp_path_factory.mktemp("airflow"))


def _store(tmp_path: Path) -> tuple[Path, Path, int]:
    now_ms = int(time.time() * 1000) - 300_000
    log_dir = tmp_path / "logs"
    build_store(log_dir, now_ms, file_delete_delay_ms=0)
    broker = tmp_path / "server.properties"
    broker.write_text(f"{OFF}\n")
    return log_dir, broker, now_ms


def test_a_cleanup_cycle_retains_only_topics_that_are_not_compacted(env: dict[str, str], tmp_path: Path) -> None:
    log_dir, broker, now_ms = _store(tmp_path)
    compacted = {p: tree_digest(log_dir / p) for p in (f"{CHANGELOG}-0", f"{CHANGELOG}-1", f"{SESSIONS}-0")}
    run = dag_test(env, "kafkalog_cleanup", now_ms, {"log_dirs": [str(log_dir)], "config_file": str(broker)})
    assert run.state == "success", run.explain()
    assert run.tasks["select_dirtiest_logs"] == "success" and run.tasks["compact"] == "skipped", run.tasks
    assert {p: tree_digest(log_dir / p) for p in compacted} == compacted
    assert not list((log_dir / f"{EVENTS}-0").glob("*.deleted"))  # marked, then deleted: the delay is 0
    assert len(list((log_dir / f"{EVENTS}-0").glob("*.log"))) == 4  # 8 hourly segments, 5 expired, and a roll
    assert "compaction: selected nothing; cleaned -" in run.output
    assert f"waiting {SESSIONS}-0: retention {NO_RETENTION}; compaction {NO_COMPACTION}" in run.output


def test_the_compact_dag_is_refused_naming_the_key(env: dict[str, str], tmp_path: Path) -> None:
    log_dir, broker, now_ms = _store(tmp_path)
    before = tree_digest(log_dir)
    run = dag_test(env, "kafkalog_compact", now_ms, {"log_dirs": [str(log_dir)], "config_file": str(broker),
                                                     "topic": CHANGELOG})
    assert run.state == "failed"
    assert run.tasks["plan_compaction"] == "failed" and run.tasks["compact"] == "upstream_failed", run.tasks
    assert REFUSED in run.output
    assert tree_digest(log_dir) == before
