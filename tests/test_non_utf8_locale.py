"""A store whose path is not ASCII, with Python's file-system encoding ASCII (``LC_ALL=C``, ``PYTHONUTF8=0``:
a host whose locale is C). Python then holds the path's bytes as surrogate escapes, which SQLAlchemy's URL
and SQLite's name could not take: every ETL action was a 500 "UnicodeEncodeError: … surrogates not allowed",
and a non-ASCII JSON argument a 400 about surrogates where stdin's same bytes were read. Real processes in
that locale, real SQLite files, whose places on disk are checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CLI = os.path.join(os.path.dirname(sys.executable), "connector-ops")


#: a column-wise load through the store's loader process, whose failure is not hidden by a fallback
COLUMNAR = """
import io
from connector_ops.environment import resources_for
store = resources_for(["virtual_files"])["virtual_files"]
print(store.create_from_csv(["a", "b"], io.BytesIO(b"1,x\\n"), ","))
"""


def run(env: dict[str, str | bytes], cwd: Path, *args: str | bytes, stdin: bytes | None = None,
        program: str = CLI) -> dict:
    """``connector-ops *args`` (or ``program``) in the C locale, UTF-8 mode off; a path in ``env`` or ``args``
    given as bytes reaches the process as those bytes."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG", "PYTHONUTF8"))}
    done = subprocess.run([program, *args], capture_output=True, input=stdin, cwd=cwd, timeout=300,
                          env={**{k.encode(): v.encode() for k, v in environ.items()},
                               b"LC_ALL": b"C", b"PYTHONUTF8": b"0",
                               **{k.encode(): v if isinstance(v, bytes) else v.encode() for k, v in env.items()}})
    return {"code": done.returncode, "out": done.stdout.decode(), "err": done.stderr.decode()}


def test_a_non_ascii_home_works_in_an_ascii_locale(tmp_path: Path) -> None:
    home = tmp_path / "hömé"
    env = {"CONNECTOR_OPS_HOME": str(home), "CONNECTOR_OPS_MIN_FREE_DISK": "0"}
    csv = tmp_path / "rows.csv"
    csv.write_text("a,b\n" + "".join(f"{i},é{i}\n" for i in range(3)))
    big = tmp_path / "big.csv"  # past the loader process's threshold: the column-wise Push (ADBC)
    big.write_text("a,b\n" + f"{1},{'x' * 90}\n" * 50_000)
    added = run(env, tmp_path, "files", "add", str(csv))
    assert added["code"] == 0, added
    pf = json.loads(added["out"])
    pushed = run(env, tmp_path, "invoke", "etl.push", json.dumps({"platformFile": pf}))
    assert pushed["code"] == 0, pushed
    vf = json.loads(pushed["out"])["virtualFileId"]
    rows = run(env, tmp_path, "invoke", "etl.iterate", json.dumps({"content": vf, "maxBatchSize": 10}))
    assert rows["code"] == 0, rows
    assert [r["b"] for r in json.loads(rows["out"])["content"]] == ["é0", "é1", "é2"], rows
    big_pf = json.loads(run(env, tmp_path, "files", "add", str(big))["out"])
    loaded = run(env, tmp_path, "invoke", "etl.push", json.dumps({"platformFile": big_pf}))
    assert loaded["code"] == 0, loaded
    # the loader process (ADBC) itself: a Push falls back to the row loader, so asked directly here
    columnar = run(env, tmp_path, "-c", COLUMNAR, program=sys.executable)
    assert columnar["code"] == 0 and len(columnar["out"].strip()) == 32, columnar
    assert (home / "virtual_files.db").is_file() and (home / "files").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.csv", "hömé", "rows.csv"]  # nothing astray

    # a JSON argument holding é, as the shell passes it (UTF-8 bytes), is read as stdin's are
    made = run(env, tmp_path, "invoke", "drive.create_folder", '{"name": "é"}'.encode())
    assert made["code"] == 0, made
    listed = run(env, tmp_path, "invoke", "drive.list", "-", stdin=b"{}")
    assert "é" in [f["name"] for f in json.loads(listed["out"])["content"]], listed
    assert (home / "drive" / "drive.db").is_file()

    # the store given by URL, a SQLite file under a non-ASCII folder
    url_env = {**env, "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{tmp_path / 'dàta' / 'vf.db'}"}
    pushed = run(url_env, tmp_path, "invoke", "etl.push", json.dumps({"platformFile": pf}))
    assert pushed["code"] == 0, pushed
    assert (tmp_path / "dàta" / "vf.db").is_file()


def test_a_home_whose_bytes_are_not_utf8_is_named(tmp_path: Path) -> None:
    """SQLite takes file names as UTF-8: a home it cannot be given is a configuration error naming it."""
    home = os.fsencode(tmp_path) + b"/h\xf6me"
    env = {"CONNECTOR_OPS_HOME": home, "CONNECTOR_OPS_MIN_FREE_DISK": "0"}
    said = run(env, tmp_path, "invoke", "etl.iterate", '{"content": [1], "maxBatchSize": 1}')
    assert said["code"] == 2, said
    message = json.loads(said["out"])["message"]
    assert message.startswith("configuration error: CONNECTOR_OPS_HOME: names a file whose path is not UTF-8 "
                              "text (byte 0xf6 at "), message
