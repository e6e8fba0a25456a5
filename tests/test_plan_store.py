"""A retention plan names its store: applied to another store, it is refused and nothing changes
(issue #35, item 3: ``retention apply --log-dir A --plan <B's plan>`` marked 23 files of B)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from conftest import run_cli, tree_digest

HOUR_MS = 3_600_000


def _store(log_dir: Path) -> None:
    assert run_cli("topics", "create", "--log-dir", str(log_dir), "--topic", "t", "--config", "retention.ms=3600000",
                   "--config", "segment.bytes=1024").code == 0
    lines = "".join(f"k{i}:v{i}\n" for i in range(100))
    assert run_cli("produce", "--log-dir", str(log_dir), "--topic", "t", "--key-separator", ":", "--partition", "0",
                   "--batch-records", "10", "--timestamp-ms", str(int(time.time() * 1000) - 2 * HOUR_MS),
                   stdin=lines).code == 0


def _unchanged(*roots: Path) -> dict[str, str]:
    return {f"{root.name}/{k}": v for root in roots for k, v in tree_digest(root).items() if not k.endswith(".lock")}


def test_a_plan_made_for_another_store_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _store(a)
    _store(b)
    plan_b = tmp_path / "plan-b.json"
    done = run_cli("retention", "plan", "--log-dir", str(b), "--json")
    plan = json.loads(done.out)
    assert plan["log_dirs"] == [str(b)] and plan["partitions"][0]["segments"]
    plan_b.write_text(done.out)
    before = _unchanged(a, b)
    refused = run_cli("retention", "apply", "--log-dir", str(a), "--plan", str(plan_b))
    assert refused.code == 1
    assert refused.err == (f"kafkalog: error: the plan was made for log dirs {b}, not {a}; nothing applied "
                           "(make the plan on this store)\n")
    assert _unchanged(a, b) == before
    # A plan without the store's name (made before plans carried it) is refused: a missing key is an error.
    plan_b.write_text(json.dumps({k: v for k, v in plan.items() if k != "log_dirs"}))
    refused = run_cli("retention", "apply", "--log-dir", str(a), "--plan", str(plan_b))
    assert refused.code == 1 and f"{plan_b}: missing key(s) log_dirs" in refused.err
    # One that names this store but lists another's partition is checked partition by partition.
    plan_b.write_text(json.dumps({**plan, "log_dirs": [str(a)]}))
    refused = run_cli("retention", "apply", "--log-dir", str(a), "--plan", str(plan_b))
    assert refused.code == 1 and f"the plan's t-0 is in log dir {b}, which is not one of {a}" in refused.err
    assert _unchanged(a, b) == before
    # On its own store it applies.
    plan_b.write_text(done.out)
    assert run_cli("retention", "apply", "--log-dir", str(b), "--plan", str(plan_b)).code == 0
    assert list((b / "t-0").glob("*.log.deleted"))
