"""The Log store page in a real browser: Debian's chromium driven by Playwright (``executable_path``, never
``playwright install``) against real Airflow on 127.0.0.1 with the demo store.

Log in at ``/auth/login``, open "Log store" from the Browse menu, see the demo store's partitions with
their ``blocked_by`` reasons, filter them, open a partition and its chart, press "Compact now" and watch
the ``kafkalog_compact`` run it triggered through Airflow succeed (then the partition's journal links to
it), and ask a what-if. A second store (connection ``store_b``, ``[kafkalog] stores``): the page's store
selector switches between them, the connection form has the kafkalog fields, and the REST API's
connection test opens a good store and names what is wrong with a bad one. Screenshots go to
``$KAFKALOG_TEST_ARTIFACTS/ui-browser`` (default: the test's temporary directory; the path is printed).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import require_spark
from synthetic import CHANGELOG, EVENTS, SESSIONS, build_store

from devtools.airflow_local import LocalAirflow
from kafkalog.tools.demo import write_demo_store

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]
CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
RUN_DEADLINE_S = 600


def _require_chromium() -> None:
    reason = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        reason = f"the playwright package is not installed ({exc})"
    if reason is None and not (CHROMIUM.exists() or shutil.which("chromium")):
        reason = f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium; make system-packages)"
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run the browser tests")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalAirflow, Path]]:
    _require_chromium()
    require_spark()
    base = tmp_path_factory.mktemp("ui-browser")
    store = base / "demo-logs"
    write_demo_store(store)
    build_store(base / "store-b", int(time.time() * 1000))
    (base / "broker.properties").write_text("log.segment.delete.delay.ms=10000\n")
    instance = LocalAirflow(base / "home", extra_env={
        "KAFKALOG_LOG_DIRS": str(store), "KAFKALOG_CONFIG": str(base / "broker.properties"),
        "AIRFLOW__KAFKALOG__STORES": "kafkalog_default,store_b", "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
        "AIRFLOW_CONN_STORE_B": json.dumps({"conn_type": "kafkalog", "extra": {
            "log_dirs": str(base / "store-b"), "store_name": "cluster-b"}}),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",  # only the page's "compact now" changes the store
        "KAFKALOG_UI_CACHE_TTL_S": "2", "KAFKALOG_UI_MAX_STALE_S": "30"})
    instance.start(dag_ids=("kafkalog_cleanup", "kafkalog_cleanup__store_b", "kafkalog_compact"))
    try:
        instance.request("PATCH", "/api/v2/dags/kafkalog_compact", {"is_paused": False})
        yield instance, store
    finally:
        instance.stop()


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    root = Path(os.environ["KAFKALOG_TEST_ARTIFACTS"]) if os.environ.get("KAFKALOG_TEST_ARTIFACTS") else tmp_path
    directory = root / "ui-browser"
    directory.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {directory}")
    return directory


def test_log_in_open_the_log_store_and_compact_a_partition_now(airflow: tuple[LocalAirflow, Path], artifacts: Path,
                                                                tmp_path: Path) -> None:
    from playwright.sync_api import expect

    instance, store = airflow
    with _logged_in(instance, tmp_path / "chromium-profile") as (page, errors):
        page.get_by_role("button", name="Browse").click()
        page.get_by_role("menuitem", name="Log store").click()
        page.wait_for_url("**/plugin/log-store**")
        frame = page.frame_locator("iframe")
        rows = frame.locator("#rows tr.row")
        expect(rows).to_have_count(6)
        expect(rows.filter(has_text="demo-events-3").locator("td.blocked")).to_have_text(
            "unlimited: retention.bytes=-1")
        expect(rows.filter(has_text="demo-changelog-0").locator("td.blocked")).to_contain_text(
            "policy: cleanup.policy=compact deletes only below the log start offset")
        expect(frame.locator("#chart-dirty svg rect")).to_have_count(1)
        page.screenshot(path=str(artifacts / "01-log-store.png"), full_page=True)

        frame.locator("#filter-q").fill("changelog")
        expect(rows).to_have_count(1)
        frame.locator("#filter-q").fill("")
        frame.locator("#filter-blocked").select_option("unlimited")
        expect(rows).to_have_count(5)
        frame.locator("#filter-blocked").select_option("")
        expect(rows).to_have_count(6)

        rows.filter(has_text="demo-changelog-0").locator("a.open").click()
        expect(frame.locator("#partition-title")).to_have_text("demo-changelog-0")
        expect(frame.locator("#partition-chart svg rect")).to_have_count(2)  # one bar per segment
        expect(frame.locator("#segments tr")).to_have_count(3)
        expect(frame.locator("#compaction-deadline")).to_contain_text("max.compaction.lag.ms")
        frame.locator("#partition").screenshot(path=str(artifacts / "02-partition.png"))

        frame.locator("#compact-now").click()
        state = frame.locator("#compact-state")
        expect(state.locator("a")).to_contain_text("kafkalog_compact manual__")
        run_id = _wait_for_run(instance, page, state, artifacts)
        run = instance.request("GET", f"/api/v2/dags/kafkalog_compact/dagRuns/{_quote(run_id)}")
        assert (run["state"], run["triggering_user_name"], run["conf"]["topic"], run["conf"]["partitions"]) == \
            ("success", "admin", "demo-changelog", [0])
        journal = frame.locator("#journal")
        expect(journal).to_contain_text("compact", timeout=30_000)
        expect(journal.locator("a")).to_have_text(f"kafkalog_compact/{run_id}")
        expect(state).to_have_attribute("data-state", "success")
        page.screenshot(path=str(artifacts / "04-after-compaction.png"), full_page=True)

        frame.locator("#wi-topic").select_option("demo-events")
        frame.locator("#wi-retention-ms").fill(str(int(time.time() * 1000) - 1_700_000_000_000 - 1_000_000))
        frame.get_by_role("button", name="Show what would happen now").click()
        expect(frame.locator("#what-if-summary")).to_contain_text("Retention would delete")
        expect(frame.locator("#what-if-table tr")).to_have_count(6)
        frame.locator("#what-if-result").screenshot(path=str(artifacts / "05-what-if.png"))

        journal.locator("a").click()  # the run's page in Airflow
        page.wait_for_url("**/dags/kafkalog_compact/runs/**")
        page.wait_for_timeout(2000)
        page.screenshot(path=str(artifacts / "06-dag-run.png"), full_page=True)
        assert errors == [], errors
        assert (store / "demo-changelog-0").is_dir()
    assert sorted(p.name for p in artifacts.glob("*.png")) == [
        "01-log-store.png", "02-partition.png", "03-compact-now-running.png", "04-after-compaction.png",
        "05-what-if.png", "06-dag-run.png"]


def test_the_store_selector_switches_stores_and_the_connection_test_opens_them(
        airflow: tuple[LocalAirflow, Path], tmp_path: Path) -> None:
    from playwright.sync_api import expect

    instance, store = airflow
    # The connection form: Airflow builds it from the provider's conn-fields.
    meta = {m["connection_type"]: m for m in instance.request("GET", "/ui/connections/hook_meta")}
    assert sorted(meta["kafkalog"]["extra_fields"]) == ["config_file", "log_dirs", "queue", "spark_conn_id",
                                                       "store_name"]
    assert meta["kafkalog"]["hook_name"] == "Kafka log store (kafkalog)"
    # "Test connection", through the REST API: a good store, then one whose log dir does not exist.
    good = instance.request("POST", "/api/v2/connections/test", {
        "connection_id": "probe", "conn_type": "kafkalog", "extra": json.dumps({"log_dirs": str(store)})})
    assert good == {"status": True, "message": f"6 partitions of 2 topics in {store.resolve()}"}
    missing = tmp_path / "nowhere"
    bad = instance.request("POST", "/api/v2/connections/test", {
        "connection_id": "probe", "conn_type": "kafkalog", "extra": json.dumps({"log_dirs": str(missing)})})
    assert bad == {"status": False, "message": f"log directory {missing} does not exist or is not a directory"}
    odd = instance.request("POST", "/api/v2/connections/test", {
        "connection_id": "probe", "conn_type": "kafkalog", "extra": json.dumps({"log_dir": str(store)})})
    assert odd["status"] is False and "unknown key(s) log_dir" in odd["message"], odd

    with _logged_in(instance, tmp_path / "chromium-profile") as (page, errors):
        page.goto(f"{instance.url}/plugin/log-store")
        frame = page.frame_locator("iframe")
        rows = frame.locator("#rows tr.row")
        expect(rows).to_have_count(6)
        picker = frame.locator("#store-select")
        expect(picker.locator("option")).to_have_text(["default (kafkalog_default)", "cluster-b (store_b)"])
        picker.select_option("store_b")
        expect(rows).to_have_count(5)
        names = sorted(rows.locator("a.open").all_inner_texts())
        assert names == sorted([f"{EVENTS}-0", f"{EVENTS}-1", f"{CHANGELOG}-0", f"{CHANGELOG}-1", f"{SESSIONS}-0"])
        expect(frame.locator("#store")).to_contain_text("Store store_b")
        rows.filter(has_text=f"{CHANGELOG}-1").locator("a.open").click()
        expect(frame.locator("#partition-title")).to_have_text(f"{CHANGELOG}-1")
        picker.select_option("kafkalog_default")
        expect(rows).to_have_count(6)
        expect(rows.filter(has_text="demo-changelog-0")).to_have_count(1)
        assert errors == [], errors


@contextlib.contextmanager
def _logged_in(instance: LocalAirflow, profile: Path) -> Iterator[tuple[Any, list[str]]]:
    """A page of a fresh Debian chromium logged in to Airflow as admin, and the page's script errors."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium")),
            headless=True, args=FLAGS, viewport={"width": 1440, "height": 1000})
        try:
            page = browser.new_page()
            page.set_default_timeout(60_000)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{instance.url}/auth/login")
            page.get_by_label("Username").fill("admin")
            page.get_by_label("Password").fill(instance.password)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(lambda url: "/auth/login" not in url)
            yield page, errors
        finally:
            browser.close()


def _wait_for_run(instance: LocalAirflow, page: Any, state: Any, artifacts: Path) -> str:
    """The run the button triggered, once the page shows it succeeded (within the deadline)."""
    runs = instance.request("GET", "/api/v2/dags/kafkalog_compact/dagRuns")["dag_runs"]
    assert len(runs) == 1, json.dumps(runs)
    run_id = str(runs[0]["dag_run_id"])
    page.screenshot(path=str(artifacts / "03-compact-now-running.png"), full_page=True)
    deadline = time.monotonic() + RUN_DEADLINE_S
    while (shown := state.get_attribute("data-state")) not in ("success", "failed"):
        if time.monotonic() > deadline:
            raise AssertionError(f"kafkalog_compact {run_id} still {shown} after {RUN_DEADLINE_S} s: "
                                 f"{instance.task_states('kafkalog_compact', run_id)}")
        time.sleep(1)
    assert shown == "success", instance.task_states("kafkalog_compact", run_id)
    return run_id


def _quote(run_id: str) -> str:
    import urllib.parse

    return urllib.parse.quote(run_id, safe="")
