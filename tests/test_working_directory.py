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
