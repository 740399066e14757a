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

import pytest

from connector_ops.kernel.disk import DEFAULT_MIN_FREE_DISK, shown_size

#: a driver's lines that take the disk's last byte (the tmpfs at ``small``)
FILL = """
    fd = os.open(os.path.join(small, "filler"), os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, bytes(4096)):
            pass
    except OSError:
        pass
    os.close(fd)
"""

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
""" + FILL + """
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


#: a store, a drive and a files folder made on the tmpfs, which is then remounted read-only (the home stays
#: writable: a read-only home is refused before any action, :func:`connector_ops.environment.pin_paths`)
READ_ONLY_DRIVER = textwrap.dedent("""
    import json, os, subprocess, sys
    small, home = sys.argv[1], sys.argv[2]
    env = {**os.environ, "CONNECTOR_OPS_HOME": home, "CONNECTOR_OPS_MIN_FREE_DISK": "0",
           "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{small}/virtual_files.db",
           "CONNECTOR_OPS_DRIVE_DIR": f"{small}/drive", "CONNECTOR_OPS_FILES_DIR": f"{small}/files"}

    def cli(*args):
        done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "connector-ops"), *args],
                              capture_output=True, text=True, env=env, cwd=home, timeout=300)
        return {"code": done.returncode, "out": done.stdout, "err": done.stderr}

    csv = os.path.join(home, "rows.csv")
    with open(csv, "w") as f:
        f.write("a,b\\n1,x\\n")
    pf = json.loads(cli("files", "add", csv)["out"])
    vf = json.loads(cli("invoke", "etl.push", json.dumps({"platformFile": pf}))["out"])["virtualFileId"]
    assert cli("invoke", "drive.create_folder", '{"name": "warm"}')["code"] == 0  # drive.db exists
    subprocess.run(["mount", "-o", "remount,ro", small], check=True)
    print(json.dumps({
        "iterate": cli("invoke", "etl.iterate", json.dumps({"content": vf, "maxBatchSize": 1})),
        "push": cli("invoke", "etl.push", json.dumps({"platformFile": pf})),
        "drive_list": cli("invoke", "drive.list", "{}"),
        "files_add": cli("files", "add", csv),
    }))
""")


def test_a_read_only_store_folder_is_named_with_its_cause(tmp_path: Path) -> None:
    """A store on a read-only mount said only "database error: unable to open database file", reads included
    (SQLite writes its -shm index beside the database to read it), naming no file; ``files add`` said
    "failed (500)" naming no command. Each names the database, its folder and "read-only file system" now."""
    seen = run_on_small_disk(tmp_path, READ_ONLY_DRIVER)
    small = tmp_path / "small"
    for name in ("iterate", "push", "drive_list"):
        folder = small / "drive" if name.startswith("drive") else small
        database = folder / ("drive.db" if name.startswith("drive") else "virtual_files.db")
        assert seen[name]["code"] != 0, (name, seen[name])
        message = json.loads(seen[name]["out"])["message"]
        assert message.startswith(f"cannot open the database {database}: its folder {folder} is on a read-only "
                                  f"file system; SQLite makes its -wal log and -shm index beside the database, "
                                  f"reads included"), (name, message)
    added = seen["files_add"]
    assert added["code"] != 0 and "connector-ops: files add failed (500): " in added["err"], added
    assert "Read-only file system" in added["err"], added


#: a process that holds all but two of its file descriptors when the drive and the store first open SQLite
FD_DRIVER = textwrap.dedent("""
    import json, os, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    from connector_ops import ConnectorError, invoke
    from connector_ops.resources.drive.local import LocalDriveResource  # imported before the limit is met
    from connector_ops.resources.virtual_files import store
    held = []
    try:
        while True:
            held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    for fd in held[-2:]:  # two left: fewer than one SQLite connection needs
        os.close(fd)
    said = {}
    for name, payload in (("drive.list", {}), ("etl.iterate", {"content": "vf_x", "maxBatchSize": 1})):
        try:
            invoke(name, payload)
            said[name] = "ok"
        except ConnectorError as exc:
            said[name] = exc.message
    for fd in held[:-2]:
        os.close(fd)
    print(json.dumps(said))
""")


#: macOS in this respect: no /proc, so listing /proc/self/fd fails (as FileNotFoundError does there) and the
#: descriptors are counted from /dev/fd (on Linux a link to the same folder, which the check below keeps open)
NO_PROC = textwrap.dedent("""
    import os
    _listdir = os.listdir
    def _without_proc(path="."):
        if os.fspath(path).startswith("/proc/self/fd"):
            raise FileNotFoundError(2, "No such file or directory", path)
        return _listdir(path)
    os.listdir = _without_proc
""")


@pytest.mark.parametrize("proc", ["with /proc", "without /proc"])
def test_too_few_file_descriptors_is_named_not_unable_to_open(tmp_path: Path, proc: str) -> None:
    """With the process at its ``ulimit -n`` SQLite said "unable to open database file" (a pipeline step:
    ``drive.upload_file failed (500): database error: unable to open database file``); it says too many
    open files, the process's limit and how to raise it now, on macOS (no /proc) too."""
    driver = (NO_PROC if proc == "without /proc" else "") + FD_DRIVER
    done = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CONNECTOR_OPS_HOME": str(tmp_path), "CONNECTOR_OPS_MIN_FREE_DISK": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    for name, database in (("drive.list", tmp_path / "drive" / "drive.db"),
                           ("etl.iterate", tmp_path / "virtual_files.db")):
        assert said[name].startswith(f"cannot open the database {database}: too many open files: the process "
                                     f"holds 6"), (name, said)  # 62 to 64, as SQLite's own opens went
        assert "of the 64 it may hold (ulimit -n); raise the limit" in said[name], (name, said)


#: a store made on a full disk by a process whose run config sets its floor to 4 KiB while
#: CONNECTOR_OPS_MIN_FREE_DISK is unset (1 GiB): its catalog cannot be written
CONFIGURED_FLOOR_DRIVER = textwrap.dedent("""
    import json, os, subprocess, sys
    small = sys.argv[1]
    env = {k: v for k, v in os.environ.items() if k != "CONNECTOR_OPS_MIN_FREE_DISK"}
    url = f"sqlite:///{small}/vf.db"
""" + FILL + """
    read = chr(10).join([
        "import json, sys",
        "from connector_ops.kernel.errors import ConnectorOpsError",
        "from connector_ops.resources.virtual_files.sql_store import sql_store",
        "try:",
        "    print(json.dumps(len(sql_store(sys.argv[1], 4096).inventory())))",
        "except ConnectorOpsError as exc:",
        "    print(json.dumps(str(exc)))",
    ])
    done = subprocess.run([sys.executable, "-c", read, url], env=env, capture_output=True, text=True, timeout=300)
    print(json.dumps({"code": done.returncode, "out": done.stdout, "err": done.stderr[-3000:]}))
""")


def test_a_full_disk_names_the_floor_the_store_was_configured_with(tmp_path: Path) -> None:
    """A store whose ``min_free_disk`` came from run config, not ``CONNECTOR_OPS_MIN_FREE_DISK``: its faults
    named the environment's floor (here the default 1 GiB, unset), not the store's; they name its own now."""
    seen = run_on_small_disk(tmp_path, CONFIGURED_FLOOR_DRIVER)
    assert seen["code"] == 0, seen["err"]
    message = json.loads(seen["out"].strip().splitlines()[-1])
    assert isinstance(message, str) and message.startswith(f"no space left on the disk of {tmp_path / 'small'}: "), seen
    assert f"CONNECTOR_OPS_MIN_FREE_DISK={shown_size(4096)} keeps free" in message, message
    # The floor as the old message named it; a bare "1 GiB" would also match a free size such as "49.1 GiB".
    assert f"CONNECTOR_OPS_MIN_FREE_DISK={shown_size(DEFAULT_MIN_FREE_DISK)}" not in message, message
