"""Per-call overhead of the ``%etl`` magic over calling the action directly (target: ≤ 10 ms).

Both sides run the same registered action with the same live resources in the same process:

* direct: ``run_action(spec, payload, resources)`` — the action and the registry's validation only;
* magic: ``ip.run_line_magic("etl", line)`` — line splitting, argument parsing, ``{{var}}`` substitution,
  JSON parsing, the session's resources (cache check), the progress context, the output wrapper;
* magic + display: the same plus ``display_formatter.format`` (the HTML/text a notebook would show).

Cases: Iterate over an inline array (no I/O: the overhead is most visible), Query with one result
(SQLite), and Query returning 65 rows (the table rendering dominates the display cost).

    .venv/bin/python benchmarks/bench_magic.py [--calls 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def per_call_ms(fn: Callable[[], object], calls: int) -> float:
    """Median wall time of one call, in ms (after a warm-up)."""
    for _ in range(max(5, calls // 20)):
        fn()
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()

    os.environ["CONNECTOR_OPS_HOME"] = tempfile.mkdtemp(prefix="bench-magic-")
    for name in [n for n in os.environ if n.startswith("CONNECTOR_OPS_") and n != "CONNECTOR_OPS_HOME"]:
        del os.environ[name]

    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from connector_ops.registry import get_action, run_action

    config = Config()
    config.HistoryAccessor.enabled = False
    ip = InteractiveShell(config=config)
    ip.run_line_magic("load_ext", "connector_ops")
    magics = ip.magics_manager.registry["ConnectorMagics"]
    resources = magics.session.resources()

    sales = resources["platform_files"].add_file(ROOT / "pipelines" / "data" / "sales.csv").to_json()
    vf = run_action(get_action("etl.push"), {"platformFile": sales}, resources)["virtualFileId"]
    ip.user_ns.update(vf=vf, items=list(range(50)))

    cases = [
        ("iterate, inline array of 50", "etl.iterate", {"content": list(range(50)), "maxBatchSize": 10},
         'iterate {"content": {{items}}, "maxBatchSize": 10}'),
        ("query, 1 row (SQLite)", "etl.query", {"virtualFileId": vf, "query": {"order_id": "SO-1042"},
                                                 "extractOnlyOneResult": True},
         'query {"virtualFileId": "{{vf}}", "query": {"order_id": "SO-1042"}, "extractOnlyOneResult": true}'),
        ("query, 65 rows (SQLite)", "etl.query", {"virtualFileId": vf, "query": {"region": "North"}},
         'query {"virtualFileId": "{{vf}}", "query": {"region": "North"}}'),
    ]
    print(f"median of {args.calls} calls per case; 2-core machine shared with other work: figures are noisy\n")
    header = f"{'case':30s} {'direct ms':>10s} {'magic ms':>9s} {'overhead':>9s} {'ratio':>6s} " \
             f"{'+display ms':>12s} {'overhead':>9s}"
    print(header)
    print("-" * len(header))
    worst = 0.0
    for label, name, payload, line in cases:
        spec = get_action(name)
        assert set(ip.run_line_magic("etl", line)) == set(run_action(spec, payload, resources))  # Iterate has a cursor
        direct = per_call_ms(lambda spec=spec, payload=payload: run_action(spec, payload, resources), args.calls)
        magic = per_call_ms(lambda line=line: ip.run_line_magic("etl", line), args.calls)
        shown = per_call_ms(lambda line=line: ip.display_formatter.format(ip.run_line_magic("etl", line)), args.calls)
        worst = max(worst, magic - direct)
        print(f"{label:30s} {direct:10.2f} {magic:9.2f} {magic - direct:+9.2f} {magic / direct:6.2f} "
              f"{shown:12.2f} {shown - direct:+9.2f}")
    verdict = "within" if worst <= 10 else "OVER"
    print(f"\nworst magic overhead: {worst:.2f} ms per call ({verdict} the 10 ms target; display excluded)")


if __name__ == "__main__":
    main()
