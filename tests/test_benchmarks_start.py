"""The READMEs are references, and every benchmark the benchmarks README names still starts.

Each ``python -m benchmarks.<name>`` that README names is run with ``--help`` (argument parsing and
every module-level import, nothing measured); it stays under 250 lines, and no README has work-diary
headings or phrases (numbered sessions, dated sections, history "kept for the record").
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "benchmarks" / "README.md"
MAX_LINES = 250
COMMAND = re.compile(r"python -m benchmarks\.([A-Za-z_][A-Za-z0-9_]*)")
HEADING = re.compile(r"^#{1,6}\s+(.*)$", re.MULTILINE)
FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)  # shell comments in code blocks are not headings
DIARY_HEADING = re.compile(
    r"\b(session|day|week|sprint|period|iteration|round|phase|attempt|take)\s*[#-]?\s*\d+"  # numbered work periods
    r"|\b(history|historical|diary|journal of|what (was|we) tried|what changed|earlier runs?)\b"
    r"|\b\d{4}-\d{2}-\d{2}\b",  # a dated section
    re.IGNORECASE)
DIARY_TEXT = re.compile(r"kept\s+for\s+the\s+history|\bsession[ -]\d+|\bin\s+session\b|\bthis\s+session\b",
                        re.IGNORECASE)


def _benchmarks_named() -> list[str]:
    return sorted(set(COMMAND.findall(README.read_text(encoding="utf-8"))))


def test_the_readme_names_benchmarks_that_exist() -> None:
    names = _benchmarks_named()
    assert names, "benchmarks/README.md names no `python -m benchmarks.<name>` command"
    missing = [n for n in names if not (REPO / "benchmarks" / f"{n}.py").is_file()]
    assert not missing, f"benchmarks/README.md names benchmarks that do not exist: {missing}"


@pytest.mark.parametrize("name", _benchmarks_named())
def test_each_benchmark_the_readme_names_starts(name: str) -> None:
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"python -m benchmarks.{name} --help exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert "usage:" in done.stdout


def _readmes() -> list[str]:
    """The project's READMEs, as git knows them (the benchmarks' and the Spark job's at least)."""
    listed = subprocess.run(["git", "ls-files", "--", "README.md", "*/README.md"], cwd=REPO, capture_output=True,
                            text=True)
    found = set(listed.stdout.split()) if listed.returncode == 0 else set()
    return sorted(found | {"benchmarks/README.md", "spark_jobs/README.md"})


def test_the_benchmarks_readme_is_short() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    assert lines < MAX_LINES, f"benchmarks/README.md has {lines} lines; keep it under {MAX_LINES}"


@pytest.mark.parametrize("readme", _readmes())
def test_a_readme_is_a_reference_not_a_diary(readme: str) -> None:
    text = (REPO / readme).read_text(encoding="utf-8")
    diary_headings = [h for h in HEADING.findall(FENCED.sub("", text)) if DIARY_HEADING.search(h)]
    assert not diary_headings, f"diary headings in {readme}: {diary_headings}"
    diary_text = sorted({m.group(0) for m in DIARY_TEXT.finditer(text)})
    assert not diary_text, f"diary phrases in {readme}: {diary_text}"
