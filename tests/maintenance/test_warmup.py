"""``warmup.warm()`` (run in a child: it freezes the garbage collector of the process it runs in)."""

from __future__ import annotations

import json
import subprocess
import sys

_CHILD = """
import json, resource
import numpy as np
from kafkalog.maintenance.warmup import warm
from kafkalog.maintenance.key_map import TABLES, KeyMap
first, again = warm(), warm()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
key_map = KeyMap(capacity=1 << 20)  # 32 MiB of table, from the memory warm() faulted in
print(json.dumps({"first": first, "again": again, "in_pool": bool(np.shares_memory(key_map._table, TABLES._slots)),
                  "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults}))
"""


def test_warm_loads_once_and_leaves_the_table_memory_free_and_faulted_in() -> None:
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300, check=True)
    doc = json.loads(out.stdout)
    assert doc["first"] > 0 and doc["again"] == 0.0
    # No map of the throwaway round kept the pool: the next map's table is in it, and touches no new page
    # (32 MiB of fresh memory: 8,192 faults of 4 KiB pages, or 16 of huge pages; 0 seen once faulted in).
    assert doc["in_pool"]
    assert doc["faults"] < 8, doc
