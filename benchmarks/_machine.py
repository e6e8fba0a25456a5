"""The line every benchmark prints first: the date, the machine, the commit and the command.

``benchmarks/README.md`` labels each results table with these, so a table can always be traced to
the machine and the code it was measured on.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _first(path: str, key: str) -> str | None:
    """The value of the first ``key: value`` line of a /proc file, or None."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() == key:
                    return value.strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    return _first("/proc/cpuinfo", "model name") or platform.processor() or platform.machine()


def memory_gib() -> float | None:
    total = _first("/proc/meminfo", "MemTotal")  # "24567890 kB"
    return int(total.split()[0]) / 2**20 if total else None


def commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def describe(module: str, argv: list[str] | None = None) -> str:
    """``date: ...  machine: ...  commit: ...  command: python -m benchmarks.<module> ...``"""
    args = sys.argv[1:] if argv is None else argv
    memory = memory_gib()
    machine = (f"{os.cpu_count()} cores, {cpu_model()} ({platform.machine()})"
               + ("" if memory is None else f", {memory:.0f} GiB RAM")
               + f", {platform.system()} {platform.release()}, Python {platform.python_version()}")
    command = " ".join(["python -m", f"benchmarks.{module}", *args])
    return f"date: {datetime.date.today().isoformat()}  machine: {machine}  commit: {commit()}  command: {command}"
