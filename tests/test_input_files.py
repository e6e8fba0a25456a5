"""Files a user names for kafkalog to read whole — a broker file (``--config-file``), a plan
(``retention apply --plan``) — are refused at once unless they are regular text files, with one line
and nothing changed (issue #35: a FIFO blocked the reader forever; a directory or a device is no file; a
segment named by mistake is no text)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli, tree_digest

HOSTILE = {
    "a FIFO": lambda base: _fifo(base / "fifo"),
    "a directory": lambda base: base,
    "a partition dir": lambda base: base / "logs" / "t-0",
    "a device": lambda base: Path("/dev/null"),
    "a segment": lambda base: base / "logs" / "t-0" / "00000000000000000000.log",
}
REFUSAL = {"a FIFO": "not a regular file (a FIFO)", "a directory": "not a regular file (a directory)",
           "a partition dir": "not a regular file (a directory)",
           "a device": "not a regular file (a device or socket)", "a segment": "not UTF-8 text"}


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _kafkalog(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own: a read that blocks fails the timeout instead of the test run."""
    return subprocess.run([sys.executable, "-m", "kafkalog.cli", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("kind", list(HOSTILE))
@pytest.mark.parametrize("option", ["--config-file", "--plan"])
def test_an_input_file_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path, option: str, kind: str) -> None:
    logs = tmp_path / "logs"
    assert run_cli("topics", "create", "--log-dir", str(logs), "--topic", "t").code == 0
    assert run_cli("produce", "--log-dir", str(logs), "--topic", "t", stdin="a\nb\n").code == 0
    path = HOSTILE[kind](tmp_path)
    before = tree_digest(logs)
    args = ["retention", "apply", "--log-dir", str(logs), option, str(path)]
    done = _kafkalog(*args)
    assert done.returncode != 0 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert str(path) in done.stderr and REFUSAL[kind] in done.stderr, done.stderr
    assert tree_digest(logs) == before


def _hostile_paths(base: Path) -> dict[str, Path]:
    """The issue's hostile paths beside a store with records: a log dir, a partition dir, a segment, a
    symlink to a partition dir, a FIFO and the filesystem root."""
    logs = base / "logs"
    assert run_cli("topics", "create", "--log-dir", str(logs), "--topic", "t").code == 0
    assert run_cli("produce", "--log-dir", str(logs), "--topic", "t", stdin="a\nb\n").code == 0
    (base / "link").symlink_to(logs / "t-0")
    return {"a log dir": logs, "a partition dir": logs / "t-0", "a segment": logs / "t-0" / "00000000000000000000.log",
            "a symlink": base / "link", "a FIFO": _fifo(base / "fifo"), "the filesystem root": Path("/")}


def test_dump_reads_only_regular_files(tmp_path: Path) -> None:
    paths = _hostile_paths(tmp_path)
    before = tree_digest(tmp_path / "logs")
    for kind, path in paths.items():
        done = _kafkalog("dump", "--files", str(path))
        if kind == "a segment":  # what dump is for
            assert done.returncode == 0 and "baseOffset: 0" in done.stdout, done.stderr
            continue
        file_type = "a FIFO" if kind == "a FIFO" else "a directory"
        assert (done.returncode, done.stdout, done.stderr) == (
            1, "", f"kafkalog: error: {path}: not a regular file ({file_type}); kafkalog dump reads only regular "
                   "files\n"), kind
    assert tree_digest(tmp_path / "logs") == before


def test_demo_writes_only_a_dir_of_its_own(tmp_path: Path) -> None:
    """``kafkalog demo --dir`` replaces an earlier demo dir and refuses anything else that exists."""
    paths = _hostile_paths(tmp_path)
    before = tree_digest(tmp_path / "logs")
    for kind, path in paths.items():
        done = _kafkalog("demo", "--dir", str(path))
        assert (done.returncode, done.stdout, done.stderr) == (
            1, "", f"kafkalog: error: {path} exists and is not a kafkalog demo dir; pick another --dir\n"), kind
    assert tree_digest(tmp_path / "logs") == before
