"""Wall time of the ``connector-ops`` console script against ``python -c "import sqlalchemy"``, same run.

    .venv/bin/python -m benchmarks.bench_cli [--runs 7]

Each command runs ``--runs`` times as a fresh process (what a user or a shell script pays); the median is
reported. Targets (issue 10): ``--help`` and ``invoke`` of an action that needs no database ≤ 0.35 s;
``invoke`` of a database action ≤ 1.5× importing SQLAlchemy alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def wall(command: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    home = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    env = {**os.environ, "CONNECTOR_OPS_HOME": str(home)}
    script = str(BIN / "connector-ops")
    source = home / "cities.csv"
    source.write_text("city,country\nParis,FR\nRome,IT\nOslo,NO\n")
    pf = subprocess.run([script, "files", "add", str(source)], env=env, check=True, capture_output=True).stdout
    vf = json.loads(subprocess.run([script, "invoke", "etl.push", json.dumps({"platformFile": json.loads(pf)})],
                                   env=env, check=True, capture_output=True).stdout)["virtualFileId"]
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        'python -c "import sqlalchemy"': [sys.executable, "-c", "import sqlalchemy"],
        "connector-ops --help": [script, "--help"],
        "connector-ops --version": [script, "--version"],
        "invoke etl.iterate (inline array)": [script, "invoke", "etl.iterate",
                                              '{"content": [1, 2, 3], "maxBatchSize": 5}'],
        "invoke etl.query (SQLite)": [script, "invoke", "etl.query",
                                      json.dumps({"virtualFileId": vf, "query": {"city": "Rome"}})],
        "connector-ops actions": [script, "actions"],
    }
    results = {name: wall(command, env, runs) for name, command in cases.items()}
    base = results['python -c "import sqlalchemy"']
    print(f"median of {runs} runs; ratio = time / `python -c \"import sqlalchemy\"` ({base:.3f} s)\n")
    print("| command | wall (s) | ratio |")
    print("|---|---|---|")
    for name, seconds in results.items():
        print(f"| `{name}` | {seconds:.3f} | {seconds / base:.2f}× |")


if __name__ == "__main__":
    main()
