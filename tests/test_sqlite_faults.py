"""A SQLite file's environment faults named, not SQLite's bare words: a full disk under the store, the local
drive's ``drive.db`` and Dagster's storage in ``DAGSTER_HOME``.

Real disks: an 8 MiB tmpfs, filled to its last byte, mounted in a mount namespace of the test's own
(``unshare -m``: the host's mount table is untouched, and the mount goes with the namespace). That needs root,
which CI has; elsewhere the test fails saying so, it is not skipped. Each command is a process of its own, as
a user's are: one that opens a WAL database on a full disk cannot make its ``-shm`` index, SQLite's
``SQLITE_IOERR`` "disk I/O error".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

#: what runs inside the namespace, once the tmpfs is mounted at argv[1]
DRIVER = textwrap.dedent("""
    import json, os, subprocess, sys
    small, home = sys.argv[1], sys.argv[2]
    env = {**os.environ, "CONNECTOR_OPS_HOME": home, "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{small}/vf.db",
           "CONNECTOR_OPS_DRIVE_DIR": f"{small}/drive", "CONNECTOR_OPS_MIN_FREE_DISK": "0",
           "DAGSTER_HOME": f"{small}/dh"}
    os.makedirs(env["DAGSTER_HOME"])

    def cli(*args):
        done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "connector-ops"), *args],
                              capture_output=True, text=True,
                              env=env, cwd=home, timeout=300)
        return {"code": done.returncode, "out": done.stdout, "err": done.stderr}

    def must(*args):
        done = cli(*args)
        assert done["code"] == 0, (args, done)
        return done["out"]

    csv = os.path.join(home, "rows.csv")
    with open(csv, "w") as f:
        f.write("a,b\\n" + "".join(f"{i},x\\n" for i in range(50)))
    pf = json.loads(must("files", "add", csv))
    vf = json.loads(must("invoke", "etl.push", json.dumps({"platformFile": pf})))["virtualFileId"]
    must("invoke", "drive.create_folder", '{"name": "warm"}')  # drive.db exists
    subprocess.run([sys.executable, "-c", "import dagster; dagster.DagsterInstance.get()"], env=env, check=True)
    fd = os.open(os.path.join(small, "filler"), os.O_WRONLY | os.O_CREAT)  # the disk's last byte taken
    try:
        while os.write(fd, bytes(4096)):
            pass
    except OSError:
        pass
    os.close(fd)
    rows = {"rows": [{"virtualFileId": vf, "content": {"a": str(i), "b": "y" * 200}} for i in range(300)]}
    print(json.dumps({
        "iterate": cli("invoke", "etl.iterate", json.dumps({"content": vf, "maxBatchSize": 1})),
        "append_rows": cli("invoke", "etl.append_rows", json.dumps(rows)),
        "drive_list": cli("invoke", "drive.list", "{}"),
        "drive_create_folder": cli("invoke", "drive.create_folder", '{"name": "new"}'),
        "pipeline_run": cli("pipeline", "run", "sales_report", "--no-progress"),
    }))
""")


def run_on_small_disk(tmp_path: Path, driver: str, size: str = "8m") -> dict:
    """``driver``'s printed JSON, run with a tmpfs of ``size`` at ``tmp_path/small`` (argv[1]) and a home
    on the test's own disk (argv[2]); a failure to mount is the test's failure, worded."""
    small, home = tmp_path / "small", tmp_path / "home"
    small.mkdir()
    home.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(driver)
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                           f'mount -t tmpfs -o size={size} tmpfs "$1" && exec "$0" "$2" "$1" "$3"',
                           sys.executable, str(small), str(script), str(home)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (
        f"the test needs a tmpfs mounted in a mount namespace of its own (root: CI runs as root; uid "
        f"{os.getuid()} here): {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_full_disk_is_named_for_the_store_the_local_drive_and_dagster_home(tmp_path: Path) -> None:
    """SQLite's "disk I/O error" (its ``-shm`` index could not grow on the full disk), reads included, was a 500
    "database error: disk I/O error"; the local drive's ``drive.db`` was never mapped at all; a ``pipeline run``
    whose ``DAGSTER_HOME`` filled said "database error: …" naming nothing. Each names its folder now."""
    seen = run_on_small_disk(tmp_path, DRIVER)
    small = tmp_path / "small"
    for name in ("iterate", "append_rows", "drive_list", "drive_create_folder"):
        said = seen[name]["out"]
        folder = small / "drive" if name.startswith("drive") else small
        assert seen[name]["code"] != 0, (name, said)
        assert "disk I/O error" not in said and "database error" not in said, (name, said)
        message = json.loads(said)["message"]
        assert message.startswith(f"no space left on the disk of {folder}: "), (name, message)
        database = folder / ("drive.db" if name.startswith("drive") else "vf.db")
        assert f"the database {database}, its log {database}-wal" in message, (name, message)
    run = seen["pipeline_run"]
    assert "database error" not in run["err"], run["err"][-2000:]
    assert f"no space left on the disk of {small / 'dh'}: " in run["err"], run["err"][-2000:]
    assert "Dagster's run and event storage in DAGSTER_HOME" in run["err"], run["err"][-2000:]
