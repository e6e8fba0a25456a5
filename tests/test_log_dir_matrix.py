"""Log dirs that cannot be log dirs (issue #35, item 5): every command that takes ``--log-dir`` × a log dir
nested inside another, one containing another, one listed twice, the filesystem root, a partition dir
(or a symlink to one), a file, a missing one and a symlink loop → refused with one line naming it,
nothing changed. ``--log-dir D --log-dir D/t-0`` used to write the topics file and new partitions into
partition t-0.

The check is where a store is made (``kafkalog.log.store.resolve_log_dirs``), so the pipeline and the
Spark job refuse the same dirs with the same words (the last tests here)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import run_cli, tree_digest

from kafkalog.log import names

NOW_MS = int(time.time() * 1000)
NESTED = ("log dirs must not contain one another (one's topics file and partitions would be written into "
          "the other's)")
PARTITION_DIR = "it is a partition dir, not a log dir; name the directory that holds it"

COMMANDS: dict[str, list[str]] = {
    "topics create": ["topics", "create", "--topic", "u"],
    "topics alter": ["topics", "alter", "--topic", "t", "--config", "retention.ms=1000"],
    "topics delete": ["topics", "delete", "--topic", "t"],
    "topics describe": ["topics", "describe"],
    "produce": ["produce", "--topic", "t"],
    "consume": ["consume", "--topic", "t", "--partition", "0"],
    "verify": ["verify"],
    "recover": ["recover"],
    "recover --full": ["recover", "--full"],
    "retention plan": ["retention", "plan", "--now-ms", str(NOW_MS)],
    "retention apply": ["retention", "apply", "--now-ms", str(NOW_MS)],
    "retention sweep": ["retention", "sweep"],
    "journal": ["journal"],
    "status": ["status", "--now-ms", str(NOW_MS)],
    "compact --dry-run": ["compact", "--dry-run", "--now-ms", str(NOW_MS)],
    "compact": ["compact", "--now-ms", str(NOW_MS)],
}


def _layout(root: Path) -> dict[str, tuple[list[str], str]]:
    """Each hostile choice of log dirs, and the one line that refuses it."""
    store = root / "store"
    assert run_cli("topics", "create", "--log-dir", str(store), "--topic", "t").code == 0
    assert run_cli("produce", "--log-dir", str(store), "--topic", "t", stdin="a\nb\n").code == 0
    (root / "same").symlink_to(store)
    (root / "partition").symlink_to(store / "t-0")
    (root / "loop1").symlink_to(root / "loop2")
    (root / "loop2").symlink_to(root / "loop1")
    segment = store / "t-0" / "00000000000000000000.log"
    first = min(p.name for p in (store / "t-0").iterdir() if names.parse_segment_file_name(p.name))  # as named
    return {
        "nested inside another": ([str(store), f"{store}/t-0"],
                                  f"log directory {store}/t-0 is inside log directory {store}: {NESTED}"),
        "containing another": ([f"{store}/..", str(store)],
                               f"log directory {store} is inside log directory {store}/.. ({root}): {NESTED}"),
        "listed twice": ([str(store), str(root / "same")],
                         f"a log directory is listed twice: {store}, {root}/same"),
        "a partition dir": ([f"{store}/t-0"], f"log directory {store}/t-0 holds segment file {first}: "
                                              f"{PARTITION_DIR}"),
        "a symlink to a partition dir": ([str(root / "partition")],
                                         f"log directory {root}/partition ({store}/t-0) holds segment file "
                                         f"{first}: {PARTITION_DIR}"),
        "a file": ([str(segment)], f"log directory {segment} does not exist or is not a directory"),
        "the filesystem root": (["/"], "log directory / is the filesystem root: every top-level directory would "
                                       "be taken for a partition; name a directory of its own"),
        "missing": ([str(root / "missing")], f"log directory {root}/missing does not exist or is not a directory"),
        "a symlink loop": ([str(root / "loop1")],
                           f"log directory {root}/loop1 cannot be resolved (Symlink loop from '{root}/loop1')"),
    }


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_refuses_log_dirs_that_cannot_be_log_dirs(tmp_path: Path, command: str) -> None:
    cases = _layout(tmp_path)
    before = tree_digest(tmp_path)
    wrong = []
    for case, (log_dirs, message) in cases.items():
        if command == "topics create" and case == "missing":
            continue  # made, as a broker makes its log dirs: below
        args = [a for d in log_dirs for a in ("--log-dir", d)]
        done = run_cli(*COMMANDS[command], *args, stdin="c\n")
        if (done.code, done.out, done.err) != (1, "", f"kafkalog: error: {message}\n"):
            wrong.append(f"{case}: exit {done.code}, stdout {done.out[:100]!r}, stderr {done.err[:300]!r}")
        if tree_digest(tmp_path) != before:
            wrong.append(f"{case}: changed the files")
            before = tree_digest(tmp_path)
    assert wrong == [], "\n".join(wrong)


def test_topics_create_makes_a_missing_log_dir_and_nothing_nested(tmp_path: Path) -> None:
    new = tmp_path / "new" / "logs"
    assert run_cli("topics", "create", "--log-dir", str(new), "--topic", "t").code == 0
    assert (new / "t-0").is_dir()
    done = run_cli("topics", "create", "--log-dir", str(new), "--log-dir", f"{new}/t-0/inner", "--topic", "u")
    assert done.err == f"kafkalog: error: log directory {new}/t-0/inner is inside log directory {new}: {NESTED}\n"
    assert not (new / "t-0" / "inner").exists() and not (new / "u-0").exists()


def test_the_pipeline_and_the_spark_job_refuse_nested_log_dirs(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from kafkalog.cycle.steps import CycleSettings
    from kafkalog.errors import LogDirError
    from spark_jobs import compact_logs

    store = tmp_path / "store"
    assert run_cli("topics", "create", "--log-dir", str(store), "--topic", "t").code == 0
    message = f"log directory {store}/t-0 is inside log directory {store}: {NESTED}"
    before = tree_digest(store)
    with pytest.raises(LogDirError) as raised:
        CycleSettings("run", NOW_MS, (str(store), f"{store}/t-0")).store()
    assert str(raised.value) == message
    report = tmp_path / "report.json"
    code = compact_logs.main(["--log-dir", str(store), "--log-dir", f"{store}/t-0", "--now-ms", str(NOW_MS),
                              "--report", str(report)])
    assert code == compact_logs.EXIT_REFUSED
    assert capsys.readouterr().err == f"compact_logs: error: {message}\n"
    assert tree_digest(store) == before
