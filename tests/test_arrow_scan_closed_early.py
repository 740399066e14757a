"""A PostgreSQL Arrow scan (what Pull to Parquet and ``pull_frame`` read) closed early, a hundred times at
varied moments: each close ends its ``COPY``, the next scan, on the same pooled connections, works, and the
process exits as it should.

Arrow reads the ``COPY`` ahead in a thread of its own. Before :meth:`.Paced.stop`, a close let that thread
and the caller's read one connection at once, and a scan or the next one waited for ever within the first
20 closes (:mod:`.arrow_reads`). Before the exit waited for Arrow's threads to let go of the streams of the
scans closed (:mod:`.paced`), one in six such processes, six at once on two cores, aborted as the interpreter
finalized ("terminate called without an active exception", exit 134), after printing its count; and, until
Arrow was given a stream that copies its reads into Arrow's memory (:meth:`.Paced.entrance`), 2 in 24 still did,
from the destructor of a block kept as Python ``bytes`` (core dumps), and one such child failed a CI run. The loops
run in child processes, several at once (the load that let it show), so that a hang fails this test (its
timeout) instead of stopping the suite.
"""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa

from connector_ops.frames import push_frame

CHILDREN = 3
ROWS = 300_000

CHILD = """
import random, sys, time
from connector_ops.environment import resources_for

url, home, vf, seed = sys.argv[1:]
resources = resources_for(environ={"CONNECTOR_OPS_HOME": home, "CONNECTOR_OPS_DATABASE_URL": url})
store = resources["virtual_files"]
rnd = random.Random(int(seed))
for _ in range(100):
    _, batches = store.scan_arrow(vf)
    for _ in range(rnd.randrange(1, 4)):
        next(batches)
    time.sleep(rnd.random() * 0.01)  # Arrow's thread reading ahead, or waiting for the server
    batches.close()
print(sum(batch.num_rows for batch in store.scan_arrow(vf)[1]))
"""


def test_scans_closed_early_end_their_copy_and_the_next_scan_works(postgres_url, postgres_resources, tmp_path):
    vf = push_frame(pa.table({"a": ["x" * 100] * ROWS, "b": [str(i) for i in range(ROWS)]}), postgres_resources)
    children = [subprocess.Popen([sys.executable, "-c", CHILD, postgres_url, str(tmp_path / f"home{i}"), vf, str(i)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in range(CHILDREN)]
    try:
        ended = [child.communicate(timeout=300) for child in children]
    finally:
        for child in children:
            child.kill()
    for child, (out, err) in zip(children, ended, strict=True):
        assert child.returncode == 0, err[-3000:]
        assert out.split()[-1] == str(ROWS)
