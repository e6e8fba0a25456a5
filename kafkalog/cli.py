"""The ``kafkalog`` command line (``shared/guide/cli.md``).

Every command exits 0 on success, 1 with one specific line on stderr when kafkalog refuses bad input
(nothing is changed then), and 2 for usage errors. ``--json`` prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from kafkalog.cycle import compaction, retention
from kafkalog.cycle.documents import plain
from kafkalog.errors import ConfigError, KafkaLogError
from kafkalog.log import shares
from kafkalog.log.config import BrokerConfig, describe
from kafkalog.log.store import METADATA_TOPICS, LogStore, PartitionLocation, configured_broker_file, configured_log_dirs
from kafkalog.maintenance import journal
from kafkalog.maintenance.journal import new_run_id
from kafkalog.policy.log_cleaner import CLEANER_DISABLED

if TYPE_CHECKING:  # opening a log loads the compiled kernels: commands that do not append do without them
    from kafkalog.log.local_log import LocalLog


def _split_config(items: Sequence[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--config {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def _broker(args: argparse.Namespace) -> BrokerConfig:
    return BrokerConfig.load(configured_broker_file(args.config_file))


def _store(args: argparse.Namespace, *, create_missing: bool = False) -> LogStore:
    broker = _broker(args)
    return LogStore(configured_log_dirs(args.log_dir, broker), broker, create_missing=create_missing)


def _emit_json(doc: dict[str, Any], out: TextIO) -> None:
    """One JSON document: a top-level field per line, and each element of a top-level list (a partition,
    a journal entry) on a line of its own. Each line comes from json's C encoder and is written as it is
    made, so ten thousand partitions print in the time it takes to read them, and still page and grep."""
    out.write("{")
    for i, (key, value) in enumerate(doc.items()):
        out.write(f"{',' if i else ''}\n  {json.dumps(key)}: ")
        if isinstance(value, list) and value:
            out.write("[")
            for j, element in enumerate(value):
                out.write(f"{',' if j else ''}\n    {json.dumps(element)}")
            out.write("\n  ]")
        else:
            out.write(json.dumps(value))
    out.write("\n}\n")


def _progress(args: argparse.Namespace, text: str) -> None:
    if not getattr(args, "json", False) and sys.stderr.isatty():
        sys.stderr.write(f"\r\x1b[K{text}")
        sys.stderr.flush()


def _progress_done(args: argparse.Namespace) -> None:
    if not getattr(args, "json", False) and sys.stderr.isatty():
        sys.stderr.write("\r\x1b[K")


# --- topics ------------------------------------------------------------------------------------
def cmd_topics_create(args: argparse.Namespace) -> int:
    store = _store(args, create_missing=True)
    info = store.create_topic(args.topic, args.partitions, _split_config(args.config))
    print(f"Created topic {info.name}.")
    return 0


def cmd_topics_alter(args: argparse.Namespace) -> int:
    store = _store(args)
    if not args.config and not args.delete_config:
        raise ConfigError("topics alter needs at least one --config k=v or --delete-config k")
    store.alter_topic(args.topic, _split_config(args.config), args.delete_config or [])
    print(f"Altered topic {args.topic}.")
    return 0


def cmd_topics_delete(args: argparse.Namespace) -> int:
    from kafkalog.maintenance.topic_delete import delete_topic

    store = _store(args)
    report = delete_topic(store, args.topic, wall_now_ms=int(time.time() * 1000), run_id=new_run_id())
    if not report.complete:
        raise KafkaLogError(f"topic {args.topic} is marked for deletion but {len(report.failures)} partition dirs "
                            f"were not renamed ({report.failures[0]}); run the command again or let the next "
                            "cleanup cycle finish it")
    print(f"Deleted topic {args.topic}: {len(report.renamed)} partition dirs renamed to *-delete; they are removed "
          "once file.delete.delay.ms has passed")
    return 0


def cmd_topics_describe(args: argparse.Namespace) -> int:
    store = _store(args)
    topics = {args.topic: store.topic(args.topic)} if args.topic is not None else store.topics()
    docs: list[dict[str, Any]] = []
    for info in topics.values():
        entries = describe(store.broker, info.overrides)
        docs.append({"topic": info.name, "topic_id": info.topic_id, "partitions": info.partitions,
                     "configs": [{"name": e.name, "value": e.value, "source": e.source} for e in entries]})
    if args.json:
        _emit_json({"topics": docs}, sys.stdout)
        return 0
    for doc in docs:
        print(f"Topic: {doc['topic']}\tTopicId: {doc['topic_id']}\tPartitionCount: {doc['partitions']}")
        for entry in doc["configs"]:
            print(f"\t{entry['name']}={entry['value']}\t({entry['source']})")
    return 0


# --- produce / consume -------------------------------------------------------------------------
def cmd_produce(args: argparse.Namespace) -> int:
    store = _store(args)
    info = store.topic(args.topic)
    if args.partition is not None and not 0 <= args.partition < info.partitions:
        raise KafkaLogError(f"partition {args.partition} does not exist: topic {args.topic} has "
                            f"{info.partitions} partitions")
    if args.batch_records < 1:
        raise ConfigError(f"--batch-records {args.batch_records}: must be at least 1")
    now_ms = int(time.time() * 1000)
    timestamp = now_ms if args.timestamp_ms is None else args.timestamp_ms
    if not 0 <= timestamp < 1 << 63:
        raise KafkaLogError(f"--timestamp-ms {timestamp}: must be between 0 and {(1 << 63) - 1} (a Kafka timestamp "
                            "is a signed 64-bit count of milliseconds)")
    if args.key_separator == "":
        raise KafkaLogError("--key-separator must not be empty (leave it out to write the whole line as the value)")
    config = store.log_config(args.topic)
    if config.message_timestamp_type == "CreateTime":
        side: Literal["before", "after"] = "before" if timestamp < now_ms else "after"
        limit, limit_key = config.timestamp_limit_ms(side)
        if abs(timestamp - now_ms) > limit:
            raise KafkaLogError(f"--timestamp-ms {timestamp} is outside the topic's accepted range: more than "
                                f"{limit_key}={limit} ms {side} now")
    from kafkalog.format.compression import CompressionType
    from kafkalog.tools.partitioner import default_partition

    codec = CompressionType.from_name(args.compression) if args.compression else None
    by_partition: dict[int, list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]]] = {}
    raw = sys.stdin.buffer.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_number = raw.count(b"\n", 0, exc.start) + 1
        raise KafkaLogError(f"stdin line {line_number}: invalid UTF-8 at byte {exc.start} ({exc.reason}); "
                            "nothing was produced") from None
    lines = text.splitlines()
    for line in lines:
        key: bytes | None = None
        value_text = line
        if args.key_separator is not None:
            key_text, sep, value_text = line.partition(args.key_separator)
            if not sep:
                raise KafkaLogError(f"line {line[:40]!r} has no key separator {args.key_separator!r}")
            key = key_text.encode()
        value = None if args.null_value is not None and value_text == args.null_value else value_text.encode()
        partition = args.partition if args.partition is not None else default_partition(key, info.partitions)
        by_partition.setdefault(partition, []).append((key, value, (), timestamp))
    if config.compact and any(k is None for rows in by_partition.values() for k, *_ in rows):
        raise KafkaLogError(f"compacted topic {args.topic} cannot accept a record without a key "
                            "(use --key-separator)")
    landed: list[tuple[int, int, int]] = []  # (partition, first offset, next offset) of what each append wrote
    for partition, rows in sorted(by_partition.items()):
        failure: OSError | None = None
        opened: list[tuple[LocalLog, int]] = []
        try:
            with store.writable_log(store.locate(args.topic, partition)) as log:
                opened.append((log, log.log_end_offset))
                try:
                    log.append_records(rows, compression=codec, batch_records=args.batch_records, now_ms=now_ms)
                except OSError as exc:
                    failure = exc  # what landed before it is flushed and checkpointed as the log closes
        except OSError as exc:
            failure = failure or exc
        for log, first in opened:  # the log's end as its file says: whole batches only
            landed.append((partition, first, log.segments[-1].read_next_offset()))
        if failure is not None:
            raise KafkaLogError(_partly_produced(args.topic, failure, landed, len(lines))) from failure
    if sys.stderr.isatty():
        print(f"Produced {sum(end - first for _, first, end in landed)} records to {args.topic}.", file=sys.stderr)
    return 0


def _partly_produced(topic: str, failure: OSError, landed: Sequence[tuple[int, int, int]], requested: int) -> str:
    """One line for a produce that an I/O error (a full disk) stopped: the error, how many records landed
    and at which offsets (producing the whole input again would append those a second time), and that
    no partial batch was left."""
    where = f": {failure.filename}" if failure.filename else ""
    count = sum(end - first for _, first, end in landed)
    ranges = ", ".join(f"{topic}-{p} offsets {first}-{end - 1}" for p, first, end in landed if end > first)
    return (f"{failure.strerror or failure}{where}; {count} of {requested} records were produced"
            f"{f' ({ranges})' if ranges else ''} and the rest were not; no partial batch was left")


def _text(blob: bytes | None) -> str:
    return "null" if blob is None else blob.decode("utf-8", "backslashreplace")


def cmd_consume(args: argparse.Namespace) -> int:
    if args.max_records is not None and args.max_records < 0:
        raise KafkaLogError(f"--max-records {args.max_records}: must not be negative")
    if args.max_records == 0:
        return 0
    store = _store(args)
    location = store.locate(args.topic, args.partition)
    log = store.open_log(location, read_only=True)
    out = sys.stdout
    for columns, row in log.read_records(args.from_offset or 0, args.max_records):
        parts = []
        if args.print_offset:
            parts.append(f"{int(columns.offset[row])}\t")
        if args.print_timestamp:
            parts.append(f"{int(columns.timestamp[row])}\t")
        parts.append(f"{_text(columns.key(row))}{args.key_separator}{_text(columns.value(row))}\n")
        out.write("".join(parts))
    return 0


# --- dump / verify / recover -------------------------------------------------------------------
def cmd_dump(args: argparse.Namespace) -> int:
    from kafkalog.tools.dump import dump_files

    paths = [Path(p) for p in args.files.split(",") if p]
    return dump_files(paths, print_data_log=args.print_data_log, deep_iteration=args.deep_iteration,
                      verify_index_only=args.verify_index_only, index_sanity_check=args.index_sanity_check,
                      max_message_size=args.max_message_size, max_bytes=args.max_bytes,
                      out=sys.stdout, err=sys.stderr)


def cmd_verify(args: argparse.Namespace) -> int:
    from kafkalog.tools.verify import verify_store

    if args.partition is not None and args.topic is None:
        raise KafkaLogError("--partition needs --topic")
    store = _store(args)
    _progress(args, "verifying…")
    report = verify_store(store, args.topic, args.partition)
    _progress_done(args)
    if args.json:
        _emit_json({"ok": report.ok, "problems": report.all_problems(),
                    "partitions": [vars(p) for p in report.partitions]}, sys.stdout)
    else:
        for problem in report.all_problems():
            print(f"PROBLEM {problem}")
        records = sum(p.records for p in report.partitions)
        batches = sum(p.batches for p in report.partitions)
        status = "OK" if report.ok else f"FAILED ({len(report.all_problems())} problems)"
        print(f"{status}: {len(report.partitions)} partitions, {batches} batches, {records} records verified")
    return 0 if report.ok else 1


def cmd_recover(args: argparse.Namespace) -> int:
    store = _store(args)
    # Kafka loads each log dir's partitions on num.recovery.threads.per.data.dir threads.
    processes = args.processes or store.broker.num_recovery_threads_per_data_dir * len(store.log_dirs)
    locations = store.partitions(symlinked=True)  # a symlinked partition dir is named among the failures
    done = shares.map_shares(partial(_recover_share, store, full=args.full), locations, processes)
    results = [r for share, _ in done for r in share]
    failures = [f for _, share in done for f in share]
    if args.json:
        _emit_json({"partitions": results, "errors": failures}, sys.stdout)
    else:
        for r in results:
            if r.get("actions") or r.get("truncated_bytes"):
                print(f"{r['topic']}-{r['partition']}: " + "; ".join(r["actions"]))
        acted = sum(1 for r in results if r.get("actions") or r.get("truncated_bytes"))
        failed = f" {len(failures)} could not be recovered." if failures else ""
        print(f"Recovered {len(results) - len(failures)} partitions ({acted} needed repair).{failed}")
        for failure in failures:
            print(f"kafkalog: error: {failure}", file=sys.stderr)
    return 1 if failures else 0


def _recover_share(store: LogStore, locations: Sequence[PartitionLocation], *,
                   full: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """Recover ``locations`` (one process's share). One partition's problem does not stop the others';
    the share's checkpoints are written once, at its end, by the process that recovered it."""
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    with store.batched_checkpoints():
        for location in locations:
            tp = location.topic_partition
            try:
                # A partition Kafka's loader would open as it is is left alone, unlocked and unread.
                end = None if full else store.clean_log_end(location)
                if end is not None:
                    results.append({"topic": tp.topic, "partition": tp.partition, "recovered_segments": [],
                                    "truncated_bytes": 0, "actions": [], "log_end_offset": end})
                    continue
                with store.writable_log(location, truncate_corrupt=True, revalidate_all=full) as log:
                    report = log.load_report
                    results.append({"topic": tp.topic, "partition": tp.partition,
                                    "recovered_segments": list(report.recovered_segments),
                                    "truncated_bytes": report.truncated_bytes, "actions": list(report.notes),
                                    "log_end_offset": log.log_end_offset})
            except (KafkaLogError, OSError) as exc:
                failures.append(f"{tp}: {exc}")
                results.append({"topic": tp.topic, "partition": tp.partition, "error": str(exc)})
    return results, failures


# --- retention, journal, status -----------------------------------------------------------------
def _usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _add_processes(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument("--processes", type=_positive_int, default=_usable_cpus(), metavar="N",
                        help=f"{verb} on up to N processes, each at least {shares.MIN_PARTITIONS_PER_PROCESS} "
                             "partitions (default: the CPUs this process may use)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be at least 1")
    return value


def _now_ms(args: argparse.Namespace) -> int:
    wall = int(time.time() * 1000)
    if args.now_ms is None:
        return wall
    if args.now_ms > wall:
        raise KafkaLogError(f"--now-ms {args.now_ms} is in the future (wall clock {wall}); a cycle may "
                            "never decide more than is due now")
    if args.now_ms < 0:
        raise KafkaLogError(f"--now-ms {args.now_ms}: must not be negative")
    return int(args.now_ms)


def _retention_targets(args: argparse.Namespace, store: LogStore, *,
                       include_metadata: bool = False) -> list[PartitionLocation]:
    if getattr(args, "partition", None) is not None and getattr(args, "topic", None) is None:
        raise KafkaLogError("--partition needs --topic")
    # A symlinked partition dir is a target too: its refusal (never followed) is an error entry of the plan.
    locations = store.partitions(getattr(args, "topic", None), getattr(args, "partition", None), symlinked=True)
    if getattr(args, "topic", None) is not None and not locations:
        store.topic(args.topic)  # raises: no such topic
        raise KafkaLogError(f"partition {args.topic}-{args.partition} does not exist")
    return [loc for loc in locations if include_metadata or loc.topic_partition.topic not in METADATA_TOPICS]


def cmd_retention(args: argparse.Namespace) -> int:
    store = _store(args)
    run_id = new_run_id()
    if args.action == "sweep":
        return _sweep(args, store, run_id)
    if getattr(args, "plan", None):
        if args.now_ms is not None or args.topic is not None or args.partition is not None:
            raise KafkaLogError("--plan carries its own clock and partitions: drop --now-ms/--topic/--partition")
        plan = retention.read_retention_plan(args.plan)
        if plan.now_ms > int(time.time() * 1000):
            raise KafkaLogError(f"{args.plan}: now_ms {plan.now_ms} is in the future")
        if args.action == "apply":
            _progress(args, "retention apply: marking")
            applied = retention.apply_retention_plan(store, plan, run_id=run_id, processes=args.processes)
    else:
        targets = _retention_targets(args, store)
        if args.action == "apply":  # planned and marked in one pass, each partition under its lock
            _progress(args, f"retention apply: planning and marking {len(targets)} partitions")
            plan, applied = retention.enforce_retention(store, targets, _now_ms(args), run_id=run_id,
                                                        processes=args.processes)
        else:
            _progress(args, f"retention plan: planning {len(targets)} partitions")
            plan = retention.plan_retention(store, targets, _now_ms(args), processes=args.processes)
    now_ms = plan.now_ms
    shown = plan.to_json()
    doc: dict[str, Any] = {"run_id": run_id, "action": args.action, **shown}
    failures = list(shown["errors"])
    if args.action == "apply":
        failures += plain(applied.errors)
        doc["errors"] = failures
    _progress_done(args)
    if args.json:
        if args.action == "apply":
            doc["applied"] = plain(applied.applied)
        _emit_json(doc, sys.stdout)
    else:
        verb = "marked deleted" if args.action == "apply" else "deletable"
        partitions = shown["partitions"]
        if args.action == "apply":
            done = {(a.topic, a.partition): set(a.segments) for a in applied.applied}
            partitions = [{**p, "segments": [s for s in p["segments"] if s["base_offset"] in
                                             done.get((p["topic"], p["partition"]), set())]} for p in partitions]
        for p in partitions:
            for seg in p["segments"]:
                print(f"{p['topic']}-{p['partition']}\t{seg['base_offset']}\t{seg['bytes']}\t{seg['reason']}\t"
                      f"{seg['detail']}")
        total = sum(seg["bytes"] for p in partitions for seg in p["segments"])
        count = sum(len(p["segments"]) for p in partitions)
        print(f"{count} segments ({total} bytes) {verb} in {len(shown['partitions'])} partitions at now_ms={now_ms}")
        # Once per topic: with no log cleaner running, compacted topics get no retention at all.
        unretained = {p["topic"]: b for p in shown["partitions"] for b in p["blocked_by"]
                      if b.startswith(f"{CLEANER_DISABLED}:")}
        for topic, reason in sorted(unretained.items()):
            print(f"{topic}: no retention: {reason}")
        for failure in failures:
            print(f"kafkalog: error: {failure['topic']}-{failure['partition']}: {failure['error']}", file=sys.stderr)
    return 1 if failures else 0


def _sweep(args: argparse.Namespace, store: LogStore, run_id: str) -> int:
    wall = int(time.time() * 1000)
    locations = _retention_targets(args, store, include_metadata=True)
    doc = retention.sweep(store, locations, wall_now_ms=wall, run_id=run_id)
    if args.json:
        _emit_json({"run_id": run_id, **doc, "errors": plain(doc["errors"])}, sys.stdout)
    else:
        print(f"Deleted {doc['deleted_files']} files ({doc['deleted_bytes']} bytes); {doc['waiting_files']} still "
              "within file.delete.delay.ms")
        for e in doc["errors"]:
            print(f"kafkalog: {e.error}", file=sys.stderr)
    return 1 if doc["errors"] else 0


def cmd_journal(args: argparse.Namespace) -> int:
    store = _store(args)
    entries = [doc for log_dir in store.log_dirs
               for doc in journal.read(log_dir, topic=args.topic, partition=args.partition, run_id=args.run_id)]
    entries.sort(key=lambda d: d.get("time_ms", 0))
    if args.json:
        _emit_json({"entries": entries}, sys.stdout)
        return 0
    for doc in entries:
        segments = ",".join(str(s) for s in doc.get("segments", []))
        print(f"{doc['time_ms']}\t{doc['run_id']}\t{doc['topic']}-{doc['partition']}\t{doc['action']}\t"
              f"segments={segments}\tbytes={doc.get('bytes', 0)}\t{doc.get('reason', '')}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from kafkalog.tools.status import status_rows

    store = _store(args)
    rows = status_rows(store, _now_ms(args), processes=args.processes)
    if args.json:
        _emit_json({"partitions": rows}, sys.stdout)
        return 0
    columns = ["topic", "partition", "cleanup_policy", "log_start_offset", "log_end_offset", "size_bytes",
               "segment_count", "pending_delete_bytes", "quarantined", "blocked_by"]
    print("\t".join(columns))
    for row in rows:
        print("\t".join("; ".join(row[c]) if isinstance(row[c], list) else str(row[c]) for c in columns))
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        raise KafkaLogError("--partition needs --topic")
    store = _store(args)
    now_ms = _now_ms(args)
    if args.wall_now_ms is not None and not now_ms <= args.wall_now_ms:
        raise KafkaLogError(f"--wall-now-ms {args.wall_now_ms} is before the cycle's clock {now_ms}")
    run_id = new_run_id()
    _progress(args, "compacting…")
    plan = compaction.plan_compaction(store, now_ms=now_ms, topic=args.topic,
                                 partitions=None if args.partition is None else [args.partition])
    done = {"cleaned": [], "errors": []} if args.dry_run else \
        compaction.compact_planned(store, plan, run_id=run_id, wall_now_ms=args.wall_now_ms)
    _progress_done(args)
    shown = plan.to_json()
    errors = shown["errors"] + done["errors"]
    if args.json:
        _emit_json({**shown, "run_id": run_id, "dry_run": args.dry_run, "cleaned": done["cleaned"], "errors": errors},
                   sys.stdout)
    else:
        for r in done["cleaned"]:
            s = r["stats"]
            print(f"{r['topic']}-{r['partition']}: cleaned [{r['first_dirty_offset']}, {r['end_offset']}) "
                  f"{s['bytes_read'] / 1e6:.1f} MB -> {s['bytes_written'] / 1e6:.1f} MB, {s['records_read']} -> "
                  f"{s['records_written']} records, {s['tombstones_removed']} tombstones and "
                  f"{s['aborted_records_removed']} aborted records removed, {s['mb_per_s']:.1f} MB/s, "
                  f"{s['recopy_percent']:.1f}% recopied")
        if args.dry_run:
            for c in shown["selected"]:
                print(f"{c['topic']}-{c['partition']}: would clean [{c['first_dirty_offset']}, "
                      f"{c['first_uncleanable_offset']}) dirty ratio {c['dirty_ratio']:.3f}, "
                      f"{c['cleanable_bytes']} cleanable bytes")
        unclean = [n["reason"] for n in shown["not_selected"] if n["kind"] == CLEANER_DISABLED]
        if unclean:
            print(f"{len(unclean)} compacted partitions not cleaned: {unclean[0]}")
        print(f"{len(done['cleaned'])} partitions cleaned, {len(errors)} failed")
        for failure in errors:
            print(f"kafkalog: error: {failure['topic']}-{failure['partition']}: {failure['error']}", file=sys.stderr)
    return 1 if errors else 0


def cmd_demo(args: argparse.Namespace) -> int:
    from kafkalog.tools.demo import run_demo

    return run_demo(Path(args.dir), sys.stdout)


# --- parser ------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log-dir", action="append", metavar="DIR",
                        help="a log directory (repeatable; env KAFKALOG_LOG_DIRS, comma-separated)")
    common.add_argument("--config-file", metavar="FILE",
                        help="broker defaults, server.properties style (env KAFKALOG_CONFIG)")
    parser = argparse.ArgumentParser(prog="kafkalog", description="Kafka-format commit-log store tools.")
    sub = parser.add_subparsers(dest="command", required=True)

    topics = sub.add_parser("topics", help="create, alter, delete and describe topics").add_subparsers(
        dest="action", required=True)
    p = topics.add_parser("create", parents=[common])
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--config", action="append", metavar="K=V")
    p.set_defaults(func=cmd_topics_create)
    p = topics.add_parser("alter", parents=[common])
    p.add_argument("--topic", required=True)
    p.add_argument("--config", action="append", metavar="K=V")
    p.add_argument("--delete-config", action="append", metavar="K")
    p.set_defaults(func=cmd_topics_alter)
    p = topics.add_parser("delete", parents=[common], help="delete a topic (its dirs go after file.delete.delay.ms)")
    p.add_argument("--topic", required=True)
    p.set_defaults(func=cmd_topics_delete)
    p = topics.add_parser("describe", parents=[common])
    p.add_argument("--topic")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_topics_describe)

    p = sub.add_parser("produce", parents=[common], help="append stdin lines as records")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int)
    p.add_argument("--key-separator")
    p.add_argument("--null-value")
    p.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--batch-records", type=int, default=500)
    p.add_argument("--timestamp-ms", type=int)
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser("consume", parents=[common], help="print records in offset order")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--from-offset", type=int)
    p.add_argument("--max-records", type=int)
    p.add_argument("--print-offset", action="store_true")
    p.add_argument("--print-timestamp", action="store_true")
    p.add_argument("--key-separator", default="\t")
    p.set_defaults(func=cmd_consume)

    p = sub.add_parser("dump", help="kafka-dump-log.sh output for log, index and snapshot files")
    p.add_argument("--files", required=True)
    p.add_argument("--print-data-log", action="store_true")
    p.add_argument("--deep-iteration", action="store_true")
    p.add_argument("--verify-index-only", action="store_true")
    p.add_argument("--index-sanity-check", action="store_true")
    p.add_argument("--max-message-size", type=int, default=5 * 1024 * 1024)
    p.add_argument("--max-bytes", type=int, default=(1 << 31) - 1)
    p.set_defaults(func=cmd_dump)

    p = sub.add_parser("verify", parents=[common], help="decode and check everything, change nothing")
    p.add_argument("--topic")
    p.add_argument("--partition", type=int)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("recover", parents=[common], help="finish interrupted swaps, rebuild indexes, cut torn tails")
    p.add_argument("--full", action="store_true",
                   help="re-validate every segment, not only those past the recovery point, and truncate each log "
                        "at its first corrupt batch (what `verify` finds)")
    p.add_argument("--processes", type=_positive_int, metavar="N",
                   help=f"recover on up to N processes, each at least {shares.MIN_PARTITIONS_PER_PROCESS} "
                        "partitions (default: num.recovery.threads.per.data.dir for each log dir)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_recover)

    retention = sub.add_parser("retention", help="plan, apply and sweep retention").add_subparsers(
        dest="action", required=True)
    for action, text in (("plan", "what retention would delete now (changes nothing)"),
                         ("apply", "mark what retention allows as .deleted, advance log start offsets"),
                         ("sweep", "delete .deleted files whose file.delete.delay.ms has passed")):
        p = retention.add_parser(action, parents=[common], help=text)
        if action != "sweep":
            p.add_argument("--now-ms", type=int, help="the cycle's clock (default: wall clock; never later)")
        if action == "apply":
            p.add_argument("--plan", metavar="PLAN.json",
                           help="apply this plan (`retention plan --json` output) instead of planning now; never "
                                "marks more than it lists")
        if action != "sweep":
            _add_processes(p, "plan and mark" if action == "apply" else "plan")
        p.add_argument("--topic")
        p.add_argument("--partition", type=int)
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=cmd_retention)

    p = sub.add_parser("journal", parents=[common], help="the maintenance journal")
    p.add_argument("--topic")
    p.add_argument("--partition", type=int)
    p.add_argument("--run-id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_journal)

    p = sub.add_parser("status", parents=[common], help="one row per partition, with why retention waits")
    p.add_argument("--now-ms", type=int)
    _add_processes(p, "read the partitions")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("compact", parents=[common], help="compact logs in this process (the cleaner)")
    p.add_argument("--topic")
    p.add_argument("--partition", type=int)
    p.add_argument("--now-ms", type=int)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--wall-now-ms", type=int,
                   help="the wall clock stamped into new tombstone delete horizons (default: the wall clock); pin it "
                        "to reproduce a run byte for byte")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_compact)

    p = sub.add_parser("demo", help="write a sample log dir with every codec, dump and verify it")
    p.add_argument("--dir", default="demo-logs")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KafkaLogError as exc:
        print(f"kafkalog: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a read-only or full file system, a permission: one line naming the file
        where = f": {exc.filename}" if exc.filename else ""
        print(f"kafkalog: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
