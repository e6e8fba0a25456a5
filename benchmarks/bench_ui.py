"""The Log store page (``kafkalog/airflow/ui_plugin.py``) on a 10,000-partition store, timed in the browser.

    python -m benchmarks.bench_ui [--partitions 10000] [--segments 5] [--rounds 5] [--quick]

Built outside the timed region: P partitions over 100 topics (every tenth topic compacted, with cleaner
checkpoints that give dirty ratios 0 … 0.8), S segments each, and a journal of 48 cleanup cycles. Airflow
runs as ``devtools.airflow_local`` starts it (api-server, scheduler, dag-processor, triggerer on
127.0.0.1, SQLite; the DAGs paused so nothing changes the store) with the plugin's default cache (fresh
10 s, then rebuilt in the background). Debian's chromium (Playwright, ``executable_path``) logs in, then:

* **first load**: a new tab opens the page until its table shows the first 50 rows — the page alone
  (``/kafkalog/``, measured by the page from navigation start) and inside the Airflow UI
  (``/plugin/log-store``, from ``goto`` until the iframe's rows are there);
* **filter / sort / page**: from the input event until the table shows the answer: a text filter
  (including the page's 150 ms debounce), the ``blocked_by`` select, sorting every row by size, the
  next page.

The peer is the limit the issue sets: each ≤ 2 s. The very first tab opens as soon as Airflow is
healthy; if the api-server is still building its first inventory (it starts when the api-server does)
that tab waits for it: reported as a one-off, not held to the limit. Also printed: the inventory build
in this process, cold and again (the snapshots of unchanged partitions are reused: what every refresh
costs), and ``kafkalog status --json`` on the same store as a separate process. Medians of ``--rounds``;
the machine is shared, so compare within one run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks._machine import describe
from devtools.airflow_local import LocalAirflow
from kafkalog.format.batch import Record, build_batch
from kafkalog.log import checkpoint, names
from kafkalog.log.index import encode_time_index
from kafkalog.log.producer_snapshot import encode_producer_snapshot
from kafkalog.maintenance.journal import JournalEntry

DATA = Path(__file__).resolve().parent / ".data"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
TOPICS, RECORDS, HOUR_MS, LIMIT_S = 100, 10, 3_600_000, 2.0
# The first tab opens as soon as Airflow is healthy, while the api-server may still be building its first
# inventory (it starts at the api-server's start): a one-off wait, reported but not held to the limit.
COLD = "first load right after the api-server start (one-off)"


def build(root: Path, partitions: int, segments: int, now_ms: int) -> None:
    """The store, written as bytes from per-segment templates (a batch, an empty offset index, one
    time-index entry, a producer snapshot at each roll), as ``bench_pipeline`` does; every tenth topic
    compacted."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    templates = []
    for i in range(segments):
        base, newest = i * RECORDS, now_ms - (segments - i) * HOUR_MS
        batch = build_batch([Record(base + j, newest - RECORDS + 1 + j, b"key-%d" % (j % 4), b"v" * 80)
                             for j in range(RECORDS)], partition_leader_epoch=0)
        templates.append((base, batch, encode_time_index([(newest, base + RECORDS - 1)], base)))
    no_producers = encode_producer_snapshot([])
    per_topic = max(1, partitions // TOPICS)
    topics: dict[str, Any] = {}
    cleaner: dict[tuple[str, int], int] = {}
    for p in range(partitions):
        t, partition = p // per_topic, p % per_topic
        topic = f"bench-{t}"
        compacted = t % 10 == 0
        config = {"cleanup.policy": "compact"} if compacted else {"retention.ms": str((segments - 1) * HOUR_MS)}
        topics[topic] = {"partitions": partition + 1, "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ", "config": config}
        if compacted:
            cleaner[(topic, partition)] = (partition % segments) * RECORDS
        directory = root / f"{topic}-{partition}"
        directory.mkdir()
        for base, batch, time_entry in templates:
            names.log_file(directory, base).write_bytes(batch)
            names.index_file(directory, base).write_bytes(b"")
            names.time_index_file(directory, base).write_bytes(time_entry)
            if base:  # the producer snapshot Kafka (and kafkalog) writes at each roll
                names.snapshot_file(directory, base).write_bytes(no_producers)
    (root / names.TOPIC_CONFIG_FILE).write_text(json.dumps({"version": 1, "generation": 1, "topics": topics}))
    log_end = {(f"bench-{p // per_topic}", p % per_topic): segments * RECORDS for p in range(partitions)}
    checkpoint.write_offset_checkpoint(root / names.RECOVERY_POINT_CHECKPOINT, log_end)
    checkpoint.write_offset_checkpoint(root / names.CLEANER_OFFSET_CHECKPOINT, cleaner)
    with open(root / names.JOURNAL_FILE, "w") as f:  # 48 cycles, 5 minutes apart: the reclaimed-bytes chart
        for cycle in range(48):
            run_id, when = f"kafkalog_cleanup/scheduled__cycle-{cycle:02d}", now_ms - (48 - cycle) * 300_000
            for p in range(cycle * 7 % per_topic, partitions, per_topic * 3):
                topic, partition = f"bench-{p // per_topic}", p % per_topic
                action = "compact" if (p // per_topic) % 10 == 0 else "mark-deleted"
                f.write(JournalEntry(run_id, when, topic, partition, action, (0,), "bench", 1000 + cycle * 10)
                        .to_json() + "\n")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def timed_rows(page: Any, action: Callable[[], Any]) -> float:
    """Seconds from ``action`` (an input event) until the table shows its answer, measured by the page."""
    renders = page.evaluate("window.kafkalogTimings.renders")
    action()
    page.wait_for_function(f"window.kafkalogTimings.renders > {renders}", timeout=60_000)
    return float(page.evaluate("window.kafkalogTimings.lastQuery")) / 1000


def interact(page: Any, times: dict[str, list[float]]) -> None:
    """One round of filtering, sorting and paging on an open page."""
    text, blocked = page.locator("#filter-q"), page.locator("#filter-blocked")
    kinds = page.locator("#filter-blocked option").evaluate_all("options => options.map(o => o.value)")
    kind = next((k for k in kinds if k.startswith("compaction")), kinds[-1])
    steps: list[tuple[str | None, Callable[[], Any]]] = [
        ("text filter 'bench-7' (incl. 150 ms debounce)", partial(text.fill, "bench-7")),
        ("clear the text filter", partial(text.fill, "")),
        ("blocked_by select", partial(blocked.select_option, kind)),
        (None, partial(blocked.select_option, "")),
        ("sort every row by size", page.locator("#header th", has_text="Size").click),
        ("next page", page.locator("#next").click)]
    for label, action in steps:
        seconds = timed_rows(page, action)
        if label is not None:
            times.setdefault(label, []).append(seconds)


def run_browser(airflow: LocalAirflow, rounds: int, profile: Path) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    times: dict[str, list[float]] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS, viewport={"width": 1440, "height": 1000})
        try:
            login = browser.new_page()
            login.goto(f"{airflow.url}/auth/login")
            login.get_by_label("Username").fill("admin")
            login.get_by_label("Password").fill(airflow.password)
            login.get_by_role("button", name="Sign in").click()
            login.wait_for_url(lambda url: "/auth/login" not in url, timeout=60_000)
            login.close()
            for i in range(rounds):
                page = browser.new_page()
                page.goto(f"{airflow.url}/kafkalog/")
                page.wait_for_function("window.kafkalogTimings.firstRows !== null", timeout=120_000)
                label = COLD if i == 0 else "first load, page alone"
                times.setdefault(label, []).append(page.evaluate("window.kafkalogTimings.firstRows") / 1000)
                interact(page, times)
                page.close()
                page = browser.new_page()
                started = time.perf_counter()
                page.goto(f"{airflow.url}/plugin/log-store")
                page.frame_locator("iframe").locator("#rows tr.row").first.wait_for(timeout=120_000)
                times.setdefault("first load inside the Airflow UI (wall clock)", []).append(
                    time.perf_counter() - started)
                page.close()
        finally:
            browser.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_ui", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--segments", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1,000 partitions, 2 rounds: a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.partitions, args.rounds = 1000, 2
    print(describe("bench_ui"), flush=True)
    with tempfile.TemporaryDirectory(dir=DATA if DATA.exists() else None) as tmp:
        base = Path(tmp)
        store = base / "logs"
        now_ms = int(time.time() * 1000)
        started = time.perf_counter()
        build(store, args.partitions, args.segments, now_ms)
        print(f"{args.partitions} partitions x {args.segments} segments built in {time.perf_counter() - started:.1f} s",
              flush=True)
        server = inventory_in_process(store)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kafkalog.cli", "status", "--json", "--log-dir", str(store)],
                       check=True, stdout=subprocess.DEVNULL)
        server["`kafkalog status --json` (a process)"] = time.perf_counter() - started
        airflow = LocalAirflow(base / "airflow", extra_env={
            "KAFKALOG_LOG_DIRS": str(store), "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True"})
        started = time.perf_counter()
        airflow.start()
        try:
            print(f"Airflow up (SQLite, LocalExecutor) in {time.perf_counter() - started:.1f} s", flush=True)
            times = run_browser(airflow, args.rounds, base / "chromium-profile")
        finally:
            airflow.stop()
    print(f"\nserver side, {args.partitions} partitions:")
    for label, seconds in server.items():
        print(f"  {label:<52}{seconds:>8.2f} s")
    print(f"\n{f'in the browser ({args.partitions} partitions)':<56}{'median s':>9}{'max s':>8}   limit")
    ok = True
    for label, values in times.items():
        passed = median(values) <= LIMIT_S
        ok &= passed or label == COLD
        verdict = ("PASS" if passed else "FAIL") if label != COLD else "(waits for the first inventory)"
        print(f"{label:<56}{median(values):>9.2f}{max(values):>8.2f}   <= {LIMIT_S:.0f} s {verdict}")
    print("\nall within the limit" if ok else "\nSOME OVER THE LIMIT")
    return 0


def inventory_in_process(store: Path) -> dict[str, float]:
    """The plugin's inventory build, cold and again (unchanged partitions' snapshots reused), and one query."""
    from kafkalog.airflow.log_store_inventory import SETTLE_S
    from kafkalog.airflow.log_store_view import InventoryCache, StoreSpec, query_partitions

    time.sleep(SETTLE_S)  # files younger than this are read again by the next build, by design
    cache, spec = InventoryCache(ttl_s=0, max_stale_s=0), StoreSpec((str(store),))
    started = time.perf_counter()
    cache.get(spec)
    cold = time.perf_counter() - started
    started = time.perf_counter()
    inventory, _ = cache.get(spec)
    again = time.perf_counter() - started
    started = time.perf_counter()
    query_partitions(inventory, q="bench-7", sort="size_bytes", descending=True)
    return {"inventory build, cold (every partition read)": cold,
            f"inventory rebuild ({inventory.snapshots_taken} partitions read again)": again,
            "one query (filter + sort every row)": time.perf_counter() - started}


if __name__ == "__main__":
    sys.exit(main())
