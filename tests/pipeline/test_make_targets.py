"""The README's two first commands for the pipeline: ``make demo`` runs one whole ``kafkalog_cleanup``
cycle through Airflow (SQLite, LocalExecutor, Spark ``local[2]``) and prints its report; ``make airflow``
serves the UI on 127.0.0.1 with a printed login, both DAGs there. Run in temporary dirs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import REPO, require_spark

from devtools.airflow_local import LocalAirflow, free_port
from tests.spark.processes import descendants, listening_addresses

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]


def _make(target: str, tmp_path: Path, **extra: str) -> tuple[list[str], dict[str, str]]:
    variables = {"DEMO_DIR": str(tmp_path / "demo-logs"), "AIRFLOW_DIR": str(tmp_path / "airflow"), **extra}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "KAFKALOG_"))}
    return ["make", "--no-print-directory", "-C", str(REPO), target, *[f"{k}={v}" for k, v in variables.items()]], env


def test_make_demo_runs_a_cycle_through_airflow_and_prints_its_report(tmp_path: Path) -> None:
    require_spark()
    cmd, env = _make("demo", tmp_path)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, start_new_session=True)
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-4000:]
    assert re.search(r"kafkalog_cleanup scheduled__\S+: success", out), out
    assert "retention: marked 17 segments" in out
    assert "compaction: selected demo-changelog-0; cleaned demo-changelog-0" in out
    assert re.search(r"demo-changelog: \d+ records, \d+ bytes removed from 1 partitions", out)
    assert "FAILED" not in out
    assert not list((tmp_path / "demo-logs").glob("demo-events-*/*.deleted"))  # the wait passed, marks deleted


def test_make_airflow_serves_the_ui_with_a_printed_login(tmp_path: Path) -> None:
    require_spark()
    port = free_port()
    cmd, env = _make("airflow", tmp_path, AIRFLOW_PORT=str(port))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        deadline, login = time.monotonic() + 300, None
        while login is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "make airflow exited before the UI was up"
            login = re.search(r"Airflow is up at (http://127\.0\.0\.1:\d+) — log in as admin / (\S+)", line)
        assert login is not None and login.group(1) == f"http://127.0.0.1:{port}"
        client = LocalAirflow(tmp_path / "airflow", port=port, password=login.group(2))
        dags = client.request("GET", "/api/v2/dags")["dags"]
        assert {d["dag_id"] for d in dags} == {"kafkalog_cleanup", "kafkalog_compact"}
        assert client.request("GET", "/api/v2/dags", auth=False, ok=(401, 403)) is not None
        assert listening_addresses([proc.pid]) == {"127.0.0.1"}
    finally:
        tree = descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGTERM)  # as Ctrl-C: the harness stops every component's process group
        proc.wait(timeout=90)
        deadline = time.monotonic() + 90
        while (left := [pid for pid in tree if _alive(pid)]) and time.monotonic() < deadline:
            time.sleep(0.5)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert left == [], "processes outlived make airflow"


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
