"""A change of working directory (``os.chdir``, a notebook's ``%cd``) does not move the store.

Relative path settings, and the default home ``./.connector_ops``, are resolved once: by the process at its
first call, by a :class:`Session` given its own environment when it is made (``pin_paths``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from connector_ops import Session
from connector_ops.environment import PATH_VARIABLES, pin_paths

SCRIPT = """
import json, os, sys
import pandas as pd
from connector_ops import invoke, push_frame

first, second = sys.argv[1:3]
os.chdir(first)
vf = push_frame(pd.DataFrame({"city": ["Paris", "Lyon"]}))
os.chdir(second)  # a notebook's %cd
rows = invoke("etl.query", {"virtualFileId": vf, "query": {"city": "Lyon"}})["result"]
pulled = invoke("etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": "out.csv"})["platformFile"]
print(json.dumps({"rows": rows, "file": pulled["id"]}))
"""


def test_invoke_keeps_its_store_after_a_chdir(tmp_path: Path) -> None:
    """The README's default home, unset, and a relative CONNECTOR_OPS_FILES_DIR: both stay where the first call
    found them (the pull after the chdir read 'virtual file … not found' in a new empty store there)."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CONNECTOR_OPS_")}
    environ["CONNECTOR_OPS_FILES_DIR"] = "exports"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(first), str(second)], env=environ, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["rows"] == [{"city": "Lyon"}]
    assert (first / ".connector_ops" / "virtual_files.db").is_file()
    assert (first / "exports" / out["file"]).is_file()
    assert os.listdir(second) == []


def test_pin_paths_makes_every_relative_path_setting_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    environ = {name: f"rel-{name.lower()}" for name in PATH_VARIABLES}
    environ["CONNECTOR_OPS_DATABASE_URL"] = "sqlite:///vf.db?timeout=5"
    environ["CONNECTOR_OPS_OUTBOX_DIR"] = "~/outbox"  # not relative: left as written
    home = pin_paths(environ)
    assert home == tmp_path / "rel-connector_ops_home"
    for name in PATH_VARIABLES:
        if name != "CONNECTOR_OPS_OUTBOX_DIR":
            assert environ[name] == str(tmp_path / f"rel-{name.lower()}"), name
    assert environ["CONNECTOR_OPS_OUTBOX_DIR"] == "~/outbox"
    assert environ["CONNECTOR_OPS_DATABASE_URL"] == f"sqlite:///{tmp_path / 'vf.db'}?timeout=5"
    unset: dict[str, str] = {}
    assert pin_paths(unset) == tmp_path / ".connector_ops"
    assert unset == {"CONNECTOR_OPS_HOME": str(tmp_path / ".connector_ops")}


def test_a_session_given_its_environment_resolves_its_paths_when_made(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    session = Session({"CONNECTOR_OPS_DRIVE_DIR": "drive-here", "CONNECTOR_OPS_OUTBOX_DIR": "outbox-here"})
    monkeypatch.chdir(second)
    with session:
        built = session.resources_for(["virtual_files", "platform_files", "drive", "mail"])
        assert built["virtual_files"].sqlite_file == str(first / ".connector_ops" / "virtual_files.db")
        assert Path(built["platform_files"].files_dir) == first / ".connector_ops" / "files"
        assert Path(built["drive"].drive_dir) == first / "drive-here"
        assert Path(built["mail"].outbox_dir) == first / "outbox-here"
    assert os.listdir(second) == []


def test_a_session_reads_its_environment_again_at_each_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pinning its paths made a ``Session(environ)`` copy the mapping when made, so a setting changed in it
    later (a rotated token, another folder) was never seen. It reads the mapping at each call; the paths it
    pinned are written into it, or kept beside a read-only one while the caller leaves them as they were."""
    from types import MappingProxyType

    monkeypatch.chdir(tmp_path)
    environ = {"CONNECTOR_OPS_HOME": "home", "CONNECTOR_OPS_FILES_DIR": "files"}
    session = Session(environ)
    assert environ["CONNECTOR_OPS_FILES_DIR"] == str(tmp_path / "files")  # written back
    environ["CONNECTOR_OPS_FILES_DIR"] = str(tmp_path / "other")
    assert session.resources_for(["platform_files"])["platform_files"].files_dir == str(tmp_path / "other")
    frozen = Session(MappingProxyType({"CONNECTOR_OPS_HOME": "home"}))
    monkeypatch.chdir(tmp_path.parent)
    assert frozen.environ()["CONNECTOR_OPS_HOME"] == str(tmp_path / "home")


#: in a mount namespace of its own: the working directory made read-only, then an action and a pipeline run
#: with the default home (``./.connector_ops``) there
UNWRITABLE_CWD = """
set -e
mount --bind "$1" "$1"
mount -o remount,bind,ro "$1"
cd "$1"
set +e
"$2" invoke drive.create_folder '{"name": "x"}' > "$3/invoke.out" 2> "$3/invoke.err"; echo $? > "$3/invoke.code"
"$2" pipeline run sales_report --no-progress > "$3/run.out" 2> "$3/run.err"; echo $? > "$3/run.code"
"""


def test_an_unwritable_working_directory_with_the_default_home_is_one_configuration_error(tmp_path: Path) -> None:
    """A container's ``WORKDIR /`` or a systemd unit's, with CONNECTOR_OPS_HOME unset: every step was a 500
    ``PermissionError``. It is a configuration error naming CONNECTOR_OPS_HOME, its default, the folder it
    resolved to and the OS's reason, before anything runs (a real read-only mount: chmod does not stop root)."""
    cwd, out = tmp_path / "cwd", tmp_path / "out"
    cwd.mkdir()
    out.mkdir()
    (tmp_path / "dh").mkdir()
    unset = (*PATH_VARIABLES, "CONNECTOR_OPS_DATABASE_URL")  # the home and every folder: the defaults
    environ = {k: v for k, v in os.environ.items() if k not in unset} | {"DAGSTER_HOME": str(tmp_path / "dh")}
    cli = os.path.join(os.path.dirname(sys.executable), "connector-ops")
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", UNWRITABLE_CWD, "sh",
                           str(cwd), cli, str(out)], capture_output=True, text=True, env=environ, timeout=600)
    assert done.returncode == 0, f"needs root for a mount namespace (uid {os.getuid()}): {done.stderr[-2000:]}"
    expected = (f"configuration error: CONNECTOR_OPS_HOME: (default ./.connector_ops, resolved to "
                f"{cwd / '.connector_ops'}) cannot be created: Read-only file system in {cwd}; set "
                f"CONNECTOR_OPS_HOME to a folder this user can write")
    for name in ("invoke", "run"):
        code, err = (out / f"{name}.code").read_text().strip(), (out / f"{name}.err").read_text()
        assert code == "2", (name, code, err[-2000:])
        assert expected in err, (name, err[-2000:])
        assert "PermissionError" not in err and "Traceback" not in err, (name, err[-2000:])
    assert json.loads((out / "invoke.out").read_text())["message"] == expected
