"""A PostgreSQL Arrow scan (what Pull to Parquet and ``pull_frame`` read) closed early, a hundred times at
varied moments: each close ends its ``COPY``, and the next scan, on the same pooled connections, works.

Arrow reads the ``COPY`` ahead in a thread of its own. Before :meth:`.Paced.stop`, a close let that thread
and the caller's read one connection at once, and a scan or the next one waited for ever within the first
20 closes (:mod:`.arrow_reads`). The loop runs in a child process, so that a hang fails this test (its
timeout) instead of stopping the suite.
"""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import random, sys, time
import pyarrow as pa
from connector_ops.environment import resources_for
from connector_ops.frames import push_frame

url, home = sys.argv[1:]
resources = resources_for(environ={"CONNECTOR_OPS_HOME": home, "CONNECTOR_OPS_DATABASE_URL": url})
store = resources["virtual_files"]
vf = push_frame(pa.table({"a": ["x" * 100] * 300_000, "b": [str(i) for i in range(300_000)]}), resources)
rnd = random.Random(1)
for _ in range(100):
    _, batches = store.scan_arrow(vf)
    for _ in range(rnd.randrange(1, 4)):
        next(batches)
    time.sleep(rnd.random() * 0.01)  # Arrow's thread reading ahead, or waiting for the server
    batches.close()
print(sum(batch.num_rows for batch in store.scan_arrow(vf)[1]))
"""


def test_scans_closed_early_end_their_copy_and_the_next_scan_works(postgres_url, tmp_path):
    child = subprocess.run([sys.executable, "-c", CHILD, postgres_url, str(tmp_path)], capture_output=True,
                           text=True, timeout=180)
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.split()[-1] == "300000"
