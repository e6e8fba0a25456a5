"""The Log store plugin's API on real Airflow (``kafkalog/airflow/ui_plugin.py``): api-server, scheduler,
dag-processor and triggerer on 127.0.0.1 (SQLite, LocalExecutor), the demo store plus two topics whose
retention and compaction moments are known, and two users: ``admin`` and ``viewer`` (Airflow's Viewer
role, which may not trigger runs). ``kafkalog_cleanup`` stays paused so nothing but this module's own
"compact now" changes the store.

- Every endpoint answers 401 without a login; the UI's cookie and a Bearer token both work.
- The inventory is ``kafkalog status`` at the same clock plus the last journal action; filter, sort
  and paging happen on the server.
- The partition view: each segment's base offset, size, largest timestamp and the moment retention
  takes it; the compaction deadline (``max.compaction.lag.ms``).
- Path-escaping parameters are refused, a symlinked partition dir is not followed, and nothing outside
  the log dir is read (atimes); read endpoints change no file of the store.
- What-if numbers equal ``kafkalog retention plan --json`` and ``compact --dry-run --json`` on a copy
  after ``kafkalog topics alter`` with the same override.
- "Compact now" triggers ``kafkalog_compact`` through Airflow's REST API as the caller: the viewer gets
  Airflow's 403, the admin a run (audited as admin) that succeeds and then shows as the partition's last
  action, with a link to the run.

The cache logic and the incremental journal reader are unit-tested here too, without Airflow.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from helpers import require_spark

from devtools.airflow_local import LocalAirflow
from kafkalog.airflow import log_store_inventory
from kafkalog.airflow.log_store_inventory import JournalTail, SnapshotMemo, build_inventory
from kafkalog.airflow.log_store_view import InventoryCache, StoreSpec
from kafkalog.log import names
from kafkalog.log.store import LogStore
from kafkalog.maintenance import journal
from kafkalog.tools.demo import write_demo_store
from kafkalog.tools.status import status_rows

MINUTE_MS, HOUR_MS, DAY_MS = 60_000, 3_600_000, 86_400_000
STATUS_FIELDS = ("topic", "partition", "log_dir", "cleanup_policy", "log_start_offset", "log_end_offset",
                 "size_bytes", "segment_count", "first_dirty_offset", "dirty_ratio", "cleanable_bytes",
                 "pending_delete_bytes", "deletable_bytes", "quarantined", "blocked_by")


class Ui:
    """The running Airflow, the store it shows, and HTTP as any caller (or none)."""

    def __init__(self, airflow: LocalAirflow, base: Path, store: Path, broker: Path, now_ms: int) -> None:
        self.airflow, self.base, self.store, self.broker, self.now_ms = airflow, base, store, broker, now_ms
        self.viewer_password = "viewer-" + airflow.password

    def http(self, method: str, path: str, body: Any = None, *, token: str | None = "admin", cookie: str | None = None,
             content_type: str = "application/json") -> tuple[int, Any]:
        headers = {"Content-Type": content_type} if body is not None else {}
        if token == "admin":
            token = self.airflow.token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if cookie:
            headers["Cookie"] = f"_token={cookie}"
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        request = urllib.request.Request(self.airflow.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def get(self, path: str, **kwargs: Any) -> Any:
        status, doc = self.http("GET", path, **kwargs)
        assert status == 200, (path, status, doc)
        return doc

    def viewer_token(self) -> str:
        status, doc = self.http("POST", "/auth/token", {"username": "viewer", "password": self.viewer_password},
                                token=None)
        assert status in (200, 201), doc
        return str(doc["access_token"])


def _add_known_topics(store: LogStore, now_ms: int) -> None:
    """``fresh-events``: three segments whose newest records are 30, 20 and 10 minutes old (retention.ms
    1 h), then an empty active segment. ``orders``: compacted, max.compaction.lag.ms 1 day, one rolled
    segment written an hour ago (all its records at one timestamp) and an active one."""
    store.create_topic("fresh-events", 1, {"retention.ms": str(HOUR_MS), "segment.bytes": "1048576"})
    with store.writable_log(store.locate("fresh-events", 0)) as log:
        for minutes in (30, 20, 10):
            ts = now_ms - minutes * MINUTE_MS
            log.append_records([(b"k%d" % i, b"v" * 50, (), ts) for i in range(20)], batch_records=5, now_ms=now_ms)
            log.roll()
    store.create_topic("orders", 1, {"cleanup.policy": "compact", "max.compaction.lag.ms": str(DAY_MS)})
    with store.writable_log(store.locate("orders", 0)) as log:
        log.append_records([(b"order-%d" % (i % 5), b"state %d" % i, (), now_ms - HOUR_MS) for i in range(40)],
                           batch_records=10, now_ms=now_ms)
        log.roll()
        log.append_records([(b"order-1", b"late", (), now_ms - MINUTE_MS)], now_ms=now_ms)


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ui]:
    base = tmp_path_factory.mktemp("ui")
    store_dir, broker = base / "demo-logs", base / "broker.properties"
    now_ms = int(time.time() * 1000)
    _add_known_topics(write_demo_store(store_dir), now_ms)
    broker.write_text("log.segment.delete.delay.ms=10000\n")
    airflow = LocalAirflow(base / "home")
    ui = Ui(airflow, base, store_dir, broker, now_ms)
    users = base / "users.json"
    users.write_text(json.dumps({"admin": airflow.password, "viewer": ui.viewer_password}))
    airflow.extra_env = {
        "KAFKALOG_LOG_DIRS": str(store_dir), "KAFKALOG_CONFIG": str(broker),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",  # no scheduled cycle touches the store
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(users),
        "KAFKALOG_UI_CACHE_TTL_S": "0", "KAFKALOG_UI_MAX_STALE_S": "0"}  # every answer from a fresh inventory
    airflow.start()
    try:
        airflow.request("PATCH", "/api/v2/dags/kafkalog_compact", {"is_paused": False})
        yield ui
    finally:
        airflow.stop()


@pytest.mark.airflow
@pytest.mark.slow
def test_every_endpoint_answers_401_without_a_login(ui: Ui) -> None:
    endpoints = [("GET", "/kafkalog/"), ("GET", "/kafkalog/api/summary"), ("GET", "/kafkalog/api/partitions"),
                 ("GET", "/kafkalog/api/partitions/demo-events/0"), ("POST", "/kafkalog/api/what-if"),
                 ("POST", "/kafkalog/api/partitions/demo-changelog/0/compact")]
    for method, path in endpoints:
        body = {"topic": "demo-events", "config": {"retention.ms": "1"}} if method == "POST" else None
        status, doc = ui.http(method, path, body, token=None)
        assert status == 401, (path, status, doc)
        assert ui.http(method, path, body, token="not-a-jwt")[0] in (401, 403), path
    for path in ("/kafkalog/docs", "/kafkalog/openapi.json", "/kafkalog/redoc"):  # nothing bypasses the check
        assert ui.http("GET", path, token=None)[0] in (401, 404), path
    token = ui.airflow.token()
    assert "<title>Log store" in ui.get("/kafkalog/", token=None, cookie=token)  # the UI's session cookie
    assert ui.get("/kafkalog/api/summary", token=token)["partitions"] == 8


@pytest.mark.airflow
@pytest.mark.slow
def test_the_inventory_is_kafkalog_status_plus_the_last_action(ui: Ui) -> None:
    page = ui.get("/kafkalog/api/partitions?limit=500")
    assert (page["total"], page["matched"]) == (8, 8)
    status = json.loads(run_cli("status", "--log-dir", str(ui.store), "--config-file", str(ui.broker), "--now-ms",
                                str(page["as_of_ms"]), "--json").out)["partitions"]
    assert [{k: r[k] for k in STATUS_FIELDS} for r in page["rows"]] == status
    by_name = {f"{r['topic']}-{r['partition']}": r for r in page["rows"]}
    assert by_name["demo-events-0"]["blocked_by"] == ["unlimited: retention.bytes=-1"]
    assert by_name["demo-changelog-0"]["blocked_kinds"] == ["policy"]
    assert any(b.startswith("retention.ms: segment 0 ") for b in by_name["fresh-events-0"]["blocked_by"])
    assert all(r["last_action"] is None for r in page["rows"])  # nothing maintained yet
    summary = ui.get("/kafkalog/api/summary")
    assert summary["log_dirs"] == [str(ui.store.resolve())]
    assert summary["blocked_kinds"]["unlimited"] == 6 and summary["compacted_partitions"] == 2
    assert [t["topic"] for t in summary["disk_by_topic"]][0] == "demo-events"
    assert summary["size_bytes"] == sum(r["size_bytes"] for r in page["rows"])


@pytest.mark.airflow
@pytest.mark.slow
def test_filter_sort_and_page_on_the_server(ui: Ui) -> None:
    def query(**params: Any) -> dict[str, Any]:
        return dict(ui.get("/kafkalog/api/partitions?" + urllib.parse.urlencode(params)))

    assert [r["topic"] for r in query(q="CHANGELOG")["rows"]] == ["demo-changelog"]
    assert query(policy="delete")["matched"] == 6
    assert [r["partition"] for r in query(topic="demo-events", limit=2, offset=2)["rows"]] == [2, 3]
    assert [r["topic"] for r in query(blocked="policy")["rows"]] == ["demo-changelog", "orders"]
    assert query(quarantined="true")["matched"] == 0
    assert query(log_dir=str(ui.store.resolve()))["matched"] == 8
    by_size = query(sort="size_bytes", order="desc", limit=500)["rows"]
    sizes = [r["size_bytes"] for r in by_size]
    assert sizes == sorted(sizes, reverse=True) and by_size[0]["topic"] == "demo-events"
    page = query(sort="size_bytes", order="desc", limit=3, offset=3)
    assert page["rows"] == by_size[3:6] and (page["matched"], page["total"]) == (8, 8)
    ratios = [r["dirty_ratio"] for r in query(sort="dirty_ratio", order="desc", limit=500)["rows"]]
    assert ratios[:2] == sorted(ratios[:2], reverse=True) and ratios[2:] == [None] * 6  # missing values last
    for bad in ({"sort": "../size"}, {"limit": 0}, {"limit": 501}, {"offset": -1}, {"order": "sideways"},
                {"log_dir": "/etc"}):
        status, doc = ui.http("GET", "/kafkalog/api/partitions?" + urllib.parse.urlencode(bad))
        assert status in (400, 422), (bad, status, doc)


@pytest.mark.airflow
@pytest.mark.slow
def test_the_partition_view_has_segments_retention_moments_and_the_compaction_deadline(ui: Ui) -> None:
    fresh = ui.get("/kafkalog/api/partitions/fresh-events/0")
    files = sorted((ui.store / "fresh-events-0").glob("*.log"))
    assert [s["base_offset"] for s in fresh["segments"]] == [int(f.name[:20]) for f in files] == [0, 20, 40, 60]
    assert [s["size_bytes"] for s in fresh["segments"]] == [f.stat().st_size for f in files]
    newest = [ui.now_ms - m * MINUTE_MS for m in (30, 20, 10)]
    assert [s["largest_timestamp_ms"] for s in fresh["segments"][:3]] == newest
    assert [s["retention_at_ms"] for s in fresh["segments"]] == [t + HOUR_MS + 1 for t in newest] + [None]
    assert not any(s["deletable_now"] for s in fresh["segments"]) and fresh["compaction"] is None
    assert fresh["config"]["retention.ms"] == {"value": str(HOUR_MS), "source": "topic"}

    expired = ui.get("/kafkalog/api/partitions/demo-events/0")
    assert all(s["deletable_now"] and s["retention_at_ms"] == expired["now_ms"] for s in expired["segments"])

    orders = ui.get("/kafkalog/api/partitions/orders/0")
    compaction = orders["compaction"]
    assert compaction["max_compaction_lag_ms"] == DAY_MS
    assert compaction["deadline_ms"] == ui.now_ms - HOUR_MS + DAY_MS and compaction["overdue_ms"] == 0
    assert compaction["first_dirty_offset"] == 0
    assert compaction["cleanable_bytes"] == orders["segments"][0]["size_bytes"]
    assert [s["cleanable"] for s in orders["segments"]] == [True, False]
    assert orders["row"]["topic"] == "orders" and orders["journal"] == []


@pytest.mark.airflow
@pytest.mark.slow
def test_path_escaping_parameters_are_refused_and_nothing_outside_is_read(ui: Ui) -> None:
    outside = ui.base / "outside"
    shutil.copytree(ui.store / "fresh-events-0", outside / "secret-0")
    link = ui.store / "secret-0"
    link.symlink_to(outside / "secret-0", target_is_directory=True)
    untouched = [outside, outside / "secret-0", *(outside / "secret-0").iterdir()]
    for path in untouched:  # relatime: any read now moves an atime older than the ctime
        os.utime(path, (0, path.stat().st_mtime), follow_symlinks=False)
    try:
        refused = [
            ("GET", "/kafkalog/api/partitions/..%2F..%2Foutside%2Fsecret/0", None),
            ("GET", "/kafkalog/api/partitions/%2E%2E/0", None),
            ("GET", "/kafkalog/api/partitions/secret/0", None),  # a symlink to a dir outside: not followed
            ("GET", "/kafkalog/api/partitions/fresh-events/-1", None),
            ("GET", "/kafkalog/api/partitions?" + urllib.parse.urlencode({"log_dir": str(outside)}), None),
            ("GET", "/kafkalog/api/partitions?" + urllib.parse.urlencode({"log_dir": f"{ui.store}/../outside"}), None),
            ("POST", "/kafkalog/api/what-if", {"topic": "../outside/secret", "config": {"retention.ms": "1"}}),
            ("POST", "/kafkalog/api/what-if", {"topic": "secret", "config": {"retention.ms": "1"}}),
            ("POST", "/kafkalog/api/partitions/..%2Foutside%2Fsecret/0/compact", {}),
            ("POST", "/kafkalog/api/partitions/secret/0/compact", {}),
        ]
        for method, path, body in refused:
            status, doc = ui.http(method, path, body)
            assert 400 <= status < 500, (path, status, doc)
        listed = ui.get("/kafkalog/api/partitions?limit=500")
        # Listed quarantined once the inventory is rebuilt (it may be served from before the link), never read.
        secret = [r for r in listed["rows"] if r["topic"] == "secret"]
        assert all(r["quarantined"] and r["log_end_offset"] is None for r in secret), secret
        assert listed["total"] == 8 + len(secret)
        assert ui.get("/kafkalog/api/partitions?topic=../outside/secret")["matched"] == 0  # a filter, not a path
    finally:
        link.unlink()
    assert [p.lstat().st_atime for p in untouched] == [0.0] * len(untouched)


def _fingerprint(root: Path) -> dict[str, tuple[int, int, str]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns,
                                       hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.airflow
@pytest.mark.slow
def test_what_if_equals_the_cli_on_a_copy_with_the_override_and_changes_nothing(ui: Ui, tmp_path: Path) -> None:
    before = _fingerprint(ui.store)
    now_ms = int(time.time() * 1000) - 1000
    cases = [("demo-events", "retention.ms", str(now_ms - 1_700_000_000_000 - 1_000_000)),
             ("demo-events", "retention.bytes", "50000"),
             ("fresh-events", "retention.ms", str(15 * MINUTE_MS)),
             ("demo-changelog", "min.cleanable.dirty.ratio", "1.0"),
             ("orders", "min.cleanable.dirty.ratio", "0.01")]
    for topic, key, value in cases:
        status, doc = ui.http("POST", "/kafkalog/api/what-if", {"topic": topic, "config": {key: value},
                                                                "now_ms": now_ms})
        assert status == 200, doc
        copy = tmp_path / f"{topic}-{key}"
        shutil.copytree(ui.store, copy)
        common = ["--log-dir", str(copy), "--config-file", str(ui.broker)]
        assert run_cli("topics", "alter", "--topic", topic, "--config", f"{key}={value}", *common).code == 0
        cli = json.loads(run_cli("retention", "plan", "--topic", topic, "--now-ms", str(now_ms), "--json", *common).out)
        after = doc["retention"]["after"]
        assert _same_dir(after["partitions"], copy, ui.store) == cli["partitions"] and after["errors"] == cli["errors"]
        assert after["now_ms"] == now_ms
        compacted = json.loads(run_cli("compact", "--dry-run", "--now-ms", str(now_ms), "--json", *common).out)
        if doc["compaction"] is None:
            assert not [s for s in compacted["selected"] + compacted["not_selected"] if s["topic"] == topic
                        and s.get("kind") != "policy"]
            continue
        plan = doc["compaction"]["after"]
        for part in ("selected", "not_selected", "checkpoint_resets", "errors"):
            mine = [e for e in compacted[part] if e["topic"] == topic]
            assert _same_dir(plan[part], copy, ui.store) == mine, (topic, key, part)
    status, doc = ui.http("POST", "/kafkalog/api/what-if", {"topic": "demo-changelog",
                                                            "config": {"min.cleanable.dirty.ratio": "1.0"}})
    assert status == 200, doc
    assert doc["compaction"]["totals"]["before"]["partitions"] == 1
    assert doc["compaction"]["totals"]["after"] == {"partitions": 0, "bytes": 0, "errors": 0}
    for bad in ({"topic": "demo-events", "config": {"segment.bytes": "1"}},  # not a what-if key
                {"topic": "demo-events", "config": {"retention.ms": "soon"}},
                {"topic": "demo-events", "config": {}},
                {"topic": "demo-events", "config": {"retention.ms": "1"}, "now_ms": now_ms + DAY_MS}):
        assert ui.http("POST", "/kafkalog/api/what-if", bad)[0] == 400, bad
    assert ui.http("POST", "/kafkalog/api/what-if", {"topic": "nope", "config": {"retention.ms": "1"}})[0] == 404
    for path in ("/kafkalog/", "/kafkalog/api/summary", "/kafkalog/api/partitions?sort=dirty_ratio",
                 "/kafkalog/api/partitions/demo-changelog/0", "/kafkalog/api/partitions/orders/0"):
        ui.get(path)
    assert _fingerprint(ui.store) == before  # read endpoints and what-ifs wrote nothing, not even a lock file


def _same_dir(entries: list[dict[str, Any]], copy: Path, original: Path) -> list[dict[str, Any]]:
    """The plan's entries with the original log dir named as the copy's."""
    return [{**e, "log_dir": str(copy.resolve())} if e.get("log_dir") == str(original.resolve()) else e
            for e in entries]


@pytest.mark.airflow
@pytest.mark.slow
def test_compact_now_triggers_kafkalog_compact_as_the_caller(ui: Ui) -> None:
    path = "/kafkalog/api/partitions/demo-changelog/0/compact"
    runs_before = ui.get("/api/v2/dags/kafkalog_compact/dagRuns")["total_entries"]
    status, doc = ui.http("POST", path, {}, token=ui.viewer_token())
    assert status == 403 and "Airflow refused" in doc["detail"], doc  # Airflow's permission, not the plugin's
    assert ui.http("POST", path, {}, token=None)[0] == 401
    assert ui.http("POST", path, b"topic=x", content_type="application/x-www-form-urlencoded")[0] == 415
    assert ui.http("POST", "/kafkalog/api/partitions/demo-events/0/compact", {})[0] == 409  # not compacted
    assert ui.http("POST", "/kafkalog/api/partitions/demo-changelog/7/compact", {})[0] == 404
    assert ui.get("/api/v2/dags/kafkalog_compact/dagRuns")["total_entries"] == runs_before

    status, doc = ui.http("POST", path, {}, cookie=ui.airflow.token(), token=None)  # as the UI sends it
    assert status == 200, doc
    run_id = doc["dag_run_id"]
    assert doc["dag_run"]["path"] == f"dags/kafkalog_compact/runs/{urllib.parse.quote(run_id, safe='')}"
    run = ui.get(f"/api/v2/dags/kafkalog_compact/dagRuns/{urllib.parse.quote(run_id, safe='')}")
    assert run["triggering_user_name"] == "admin"
    assert run["conf"] == {"store": "kafkalog_default", "topic": "demo-changelog", "partitions": [0]}
    audit = ui.get("/api/v2/eventLogs?dag_id=kafkalog_compact&event=trigger_dag_run")["event_logs"]
    assert [e["owner"] for e in audit] == ["admin"]

    require_spark()
    assert ui.airflow.wait_for_run("kafkalog_compact", run_id, timeout_s=600) == "success", \
        ui.airflow.task_states("kafkalog_compact", run_id)
    row = ui.get("/kafkalog/api/partitions?topic=demo-changelog")["rows"][0]
    assert row["last_action"]["action"] == "compact" and row["last_action"]["bytes"] > 0
    assert row["last_action"]["dag_run"] == {**doc["dag_run"], "dag_id": "kafkalog_compact", "dag_run_id": run_id}
    assert row["dirty_ratio"] == 0.0
    view = ui.get("/kafkalog/api/partitions/demo-changelog/0")
    assert [(j["action"], j["run_id"]) for j in view["journal"]] == [("compact", f"kafkalog_compact/{run_id}")]
    cycles = ui.get("/kafkalog/api/summary")["cycles"]
    assert [(c["run_id"], c["compaction"] == row["last_action"]["bytes"]) for c in cycles] == [
        (f"kafkalog_compact/{run_id}", True)]


# --- without Airflow -------------------------------------------------------------------------------------
def test_the_cache_serves_stale_inventories_while_one_thread_rebuilds(tmp_path: Path) -> None:
    write_demo_store(tmp_path / "logs")
    spec = StoreSpec((str(tmp_path / "logs"),))
    clock = [1_000.0]
    cache = InventoryCache(ttl_s=10, max_stale_s=100, clock=lambda: clock[0])
    first, fresh = cache.get(spec)
    assert fresh["age_s"] == 0 and not fresh["refreshing"]
    clock[0] += 5
    assert cache.get(spec)[0] is first  # fresh: served as is
    clock[0] += 10
    stale, fresh = cache.get(spec)
    assert stale is first and fresh["age_s"] == 15  # stale: served, and rebuilt in the background
    for _ in range(200):
        if cache.get(spec)[0] is not first:
            break
        time.sleep(0.05)
    rebuilt, fresh = cache.get(spec)
    assert rebuilt is not first and fresh["age_s"] == 0
    clock[0] += 1000
    assert cache.get(spec)[0] is not rebuilt  # too old to serve: rebuilt before answering


def test_the_journal_is_read_incrementally_and_a_torn_line_waits(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    tail = JournalTail(tmp_path / names.JOURNAL_FILE)
    tail.update()
    assert tail.last == {}
    journal.append(tmp_path, journal.JournalEntry("kafkalog_cleanup/scheduled__1", 10, "t", 0, "mark-deleted",
                                                  (0,), "retention.ms", 100))
    journal.append(tmp_path, journal.JournalEntry("run-cli", 20, "t", 0, "compact", (0,), "cleaned", 40))
    with open(tmp_path / names.JOURNAL_FILE, "a") as f:
        f.write('{"run_id": "kafkalog_cleanup/scheduled__2", "time_ms": 30, "topic": "t"')  # torn
    tail.update()
    assert tail.last[("t", 0)]["action"] == "compact"
    assert {r: (v["retention"], v["compaction"]) for r, v in tail.runs.items()} == {
        "kafkalog_cleanup/scheduled__1": (100, 0), "run-cli": (0, 40)}
    offset = tail.offset
    with open(tmp_path / names.JOURNAL_FILE, "a") as f:
        f.write(', "partition": 0, "action": "sweep", "bytes": 7}\n')
    tail.update()
    assert tail.offset > offset and tail.runs["kafkalog_cleanup/scheduled__2"]["swept"] == 7


def test_unchanged_partitions_are_not_read_again_and_changed_ones_are(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_store_inventory, "SETTLE_S", 0.0)  # keep snapshots of files written just now
    store = write_demo_store(tmp_path / "logs")
    memo, journals = SnapshotMemo(), {}

    def build() -> tuple[int, dict[str, Any]]:
        time.sleep(0.05)
        inventory = build_inventory(LogStore([tmp_path / "logs"]), int(time.time() * 1000), memo, journals)
        rows = [{k: r[k] for k in STATUS_FIELDS} for r in inventory.rows]
        assert rows == status_rows(LogStore([tmp_path / "logs"]), inventory.as_of_ms)  # exactly `kafkalog status`
        return inventory.snapshots_taken, {f"{r['topic']}-{r['partition']}": r for r in rows}

    assert build()[0] == 6
    assert build()[0] == 0
    with store.writable_log(store.locate("demo-changelog", 0)) as log:  # an append to the active segment
        log.append_records([(b"key-1", b"new", (), int(time.time() * 1000))], now_ms=int(time.time() * 1000))
    taken, rows = build()
    assert taken == 1 and rows["demo-changelog-0"]["log_end_offset"] == 1501
    with store.writable_log(store.locate("demo-events", 2)) as log:  # a roll
        log.roll()
    taken, rows = build()
    assert taken == 1 and rows["demo-events-2"]["segment_count"] == 4
    run_cli("topics", "alter", "--log-dir", str(tmp_path / "logs"), "--topic", "demo-events", "--config",
            "retention.bytes=1000")
    taken, rows = build()
    assert taken == 5 and rows["demo-events-0"]["deletable_bytes"] == rows["demo-events-0"]["size_bytes"]


def test_a_symlinked_partition_dir_is_listed_quarantined_and_never_read(tmp_path: Path) -> None:
    """The Log store page lists every partition ``kafkalog status`` lists: one whose dir is a symlink is
    a quarantined row naming the refusal, and nothing behind the link is opened (issue #35, item 7)."""
    logs, elsewhere = tmp_path / "logs", tmp_path / "elsewhere"
    write_demo_store(logs)
    elsewhere.mkdir()
    shutil.move(logs / "demo-events-1", elsewhere / "demo-events-1")
    (logs / "demo-events-1").symlink_to(elsewhere / "demo-events-1")
    behind = [elsewhere / "demo-events-1", *(elsewhere / "demo-events-1").iterdir()]
    for path in behind:  # relatime: any read now moves an atime older than the ctime
        os.utime(path, (0, path.stat().st_mtime))
    inventory = build_inventory(LogStore([logs]), int(time.time() * 1000), SnapshotMemo(), {})
    rows = {(r["topic"], r["partition"]): r for r in inventory.rows}
    assert [{k: r[k] for k in STATUS_FIELDS} for r in inventory.rows] == status_rows(LogStore([logs]),
                                                                                   inventory.as_of_ms)
    linked = rows[("demo-events", 1)]
    assert linked["quarantined"] and linked["log_end_offset"] is None and linked["blocked_by"] == [
        f"corrupt: {logs}/demo-events-1: partition directory is a symlink to {elsewhere}/demo-events-1; kafkalog "
        "does not follow it into another directory (put the partition's directory itself in the log dir)"]
    assert len(rows) == 6 and [p.stat().st_atime for p in behind] == [0.0] * len(behind)


@pytest.mark.airflow
def test_importing_the_plugin_loads_no_numba(tmp_path: Path) -> None:
    """Every Airflow component loads the plugins; only the api-server's requests need the log layer."""
    code = ("import sys\n"
            "from airflow import plugins_manager\n"
            "plugins_manager.ensure_plugins_loaded()\n"
            "module = sys.modules['kafkalog.airflow.ui_plugin']\n"
            "assert module.KafkalogUiPlugin.fastapi_apps[0]['url_prefix'] == '/kafkalog'\n"
            "print(sorted(m for m in ('numba', 'numpy', 'kafkalog.log.segment') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "AIRFLOW_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
