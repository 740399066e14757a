"""Fuzzing every action through ``invoke`` (issue 14): random JSON of random depth and size.

Runs in a child process under an address-space limit (RLIMIT_AS), so a runaway allocation fails the test
instead of the machine. Only ``ConnectorError`` may leave ``invoke``, and a 5xx only for faults that are
not the caller's (none exist in this hermetic set-up: SQLite, the local drive, the outbox, and a resolver
stand-in that knows no names, so no fuzzed link is ever connected to).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

#: the child's address-space cap (the interpreter, pydantic, SQLAlchemy and pyarrow take ~1 GB of it)
CAP_BYTES = 3 << 30
EXAMPLES = int(os.environ.get("CONNECTOR_OPS_FUZZ_EXAMPLES", "40"))

CHILD = textwrap.dedent('''
    import resource, sys, traceback
    resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))

    from hypothesis import HealthCheck, given, settings, strategies as st

    from connector_ops import ConnectorError, invoke
    from connector_ops.environment import resources_for
    from connector_ops.registry import ACTION_MODULES, get_action

    def no_names(host, port):
        raise LookupError("the fuzz resolver knows no names")

    res = resources_for()
    res["platform_files"].set_resolver(no_names)
    seed_file = res["platform_files"].add_bytes(b"a,b\\n1,2\\n", "seed.csv").to_json()
    seed_vf = invoke("etl.push", {{"platformFile": seed_file}}, res)["virtualFileId"]

    def nest(value, depth, as_map):
        for i in range(depth):
            value = {{"k": value}} if as_map and i % 2 else [value]
        return value

    leaves = st.one_of(
        st.none(), st.booleans(), st.integers(min_value=-(10**6000), max_value=10**6000),
        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40),
        st.sampled_from([seed_vf, seed_file["link"], "http://files.test/x.csv", "\\x00", "\\r\\n",
                         "base64", "$regex", "^(a+)+$", "upper|trim", "a@example.org", "csv", "json"]),
    )
    json_values = st.recursive(leaves, lambda inner: st.one_of(
        st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=8), inner, max_size=6)), max_leaves=30)
    deep = st.builds(nest, json_values, st.integers(0, 3000), st.booleans())
    values = st.one_of(json_values, json_values, deep, st.just(seed_file), st.just({{"a": {{"$in": ["1"] * 70000}}}}))

    def fields_of(name):
        schema = get_action(name).input_model.model_json_schema(by_alias=True)
        return sorted(schema.get("properties", {{}}))

    FIELDS = {{name: fields_of(name) for name in ACTION_MODULES}}

    @st.composite
    def payloads(draw):
        name = draw(st.sampled_from(sorted(ACTION_MODULES)))
        known = st.sampled_from(FIELDS[name]) if FIELDS[name] else st.text(max_size=8)
        keys = draw(st.lists(st.one_of(known, known, st.text(max_size=8)), max_size=6, unique=True))
        payload = {{k: draw(values) for k in keys}}
        return name, draw(st.one_of(st.just(payload), json_values)) if draw(st.integers(0, 9)) == 0 else payload

    failures = []

    @settings(max_examples={examples}, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(payloads())
    def run(case):
        name, payload = case
        try:
            invoke(name, payload, res)
        except ConnectorError as exc:
            if exc.status >= 500:
                failures.append((name, repr(payload)[:300], exc.status, exc.message[:300]))
        except BaseException as exc:  # noqa: BLE001 - exactly what the test is about
            failures.append((name, repr(payload)[:300], type(exc).__name__, traceback.format_exc()[-600:]))

    for action in sorted(ACTION_MODULES):  # every action at least with its own known fields, deep and wide
        for depth in (0, 50, 3000):
            payload = {{f: nest(seed_vf, depth, True) for f in FIELDS[action]}}
            try:
                invoke(action, payload, res)
            except ConnectorError as exc:
                if exc.status >= 500:
                    failures.append((action, "deep " + str(depth), exc.status, exc.message[:300]))
            except BaseException as exc:  # noqa: BLE001
                failures.append((action, "deep " + str(depth), type(exc).__name__, traceback.format_exc()[-600:]))
    run()
    for failure in failures:
        print("FAIL", failure)
    print("checked", flush=True)
    sys.exit(1 if failures else 0)
''')


def test_random_json_to_every_action_only_leaves_as_connector_errors(env, tmp_path: Path) -> None:
    code = CHILD.format(cap=CAP_BYTES, examples=EXAMPLES)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1200,
                           env={**os.environ, "CONNECTOR_OPS_HOME": str(tmp_path / "fuzz-home")},
                           cwd=str(tmp_path))
    assert child.returncode == 0 and "checked" in child.stdout, child.stdout[-5000:] + child.stderr[-3000:]
