"""``warmup.warm()``: loads the cleaner's kernels once per process and touches no real log."""

from __future__ import annotations

import json
import subprocess
import sys

_CHILD = """
import json
from kafkalog.maintenance.warmup import warm
print(json.dumps({"first": warm(), "again": warm()}))
"""


def test_warm_loads_once_per_process() -> None:
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300, check=True)
    doc = json.loads(out.stdout)
    assert doc["first"] > 0 and doc["again"] == 0.0
