"""Several processes writing one virtual-file database at once: no "database is locked", nothing lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from connector_ops import invoke

WORKER = """
import json, sys
from connector_ops import invoke
vf, worker = sys.argv[1], int(sys.argv[2])
for i in range(25):
    invoke("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"worker": str(worker), "i": str(i)}}]})
    invoke("etl.iterate", {"content": vf, "maxBatchSize": 7})
    invoke("etl.query", {"virtualFileId": vf, "query": {"worker": str(worker)}})
print(json.dumps("done"))
"""


@pytest.mark.parametrize("workers", [3])
def test_parallel_processes_append_iterate_and_query(files, env, workers):
    pf = files.add_bytes(b"worker,i\n", "start.csv").to_json()
    vf = invoke("etl.push", {"platformFile": pf})["virtualFileId"]
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, vf, str(w)], env={**os.environ, **env},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(workers)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert json.loads(out) == "done"
    rows = invoke("etl.query", {"virtualFileId": vf, "query": {}})["result"]
    assert len(rows) == workers * 25
    for w in range(workers):
        mine = [int(r["i"]) for r in rows if r["worker"] == str(w)]
        assert mine == list(range(25))  # each worker's rows, in its order
