"""The README's "Configuration keys" section lists every key the config layer accepts, each once: every topic
config with its broker keys, every broker-only key; and says for each that kafkalog honours it (and how) or
that it is not applicable (and why). A key added to ``kafkalog.log.config`` without a line there fails here."""

from __future__ import annotations

import re
from pathlib import Path

from kafkalog.log.config import BROKER_CONFIGS, TOPIC_CONFIGS

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Configuration keys\n"


def _rows() -> list[list[str]]:
    text = README.read_text(encoding="utf-8")
    assert SECTION in text
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| `")]


def test_every_accepted_key_has_one_line_saying_what_kafkalog_does_with_it() -> None:
    accepted = set(TOPIC_CONFIGS) | {s.name for k in TOPIC_CONFIGS.values() for s in k.synonyms} | set(BROKER_CONFIGS)
    named: list[str] = []
    for cells in _rows():
        named += re.findall(r"`([a-z0-9.]+)`", " ".join(cells[:-1]))
        assert re.match(r"(honoured|not applicable): \S", cells[-1]), cells
    assert sorted(named) == sorted(accepted)


def test_each_topic_config_line_names_its_broker_keys_in_kafkas_order() -> None:
    for cells in _rows():
        if cells[0].strip("`") not in TOPIC_CONFIGS:
            continue
        key = TOPIC_CONFIGS[cells[0].strip("`")]
        synonyms = [s.name for s in key.synonyms]
        listed = re.findall(r"`([a-z0-9.]+)`", cells[1]) if cells[1] != "same name" else [key.name]
        assert listed == synonyms, (key.name, cells[1])
