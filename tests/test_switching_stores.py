"""Moving to the multi-host settings docs/deployment.md recommends (CONNECTOR_OPS_FILES_BACKEND=database, a
PostgreSQL CONNECTOR_OPS_DATABASE_URL) leaves the home's old stores where they are: gc says so, and the
documented way to move their files works."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from connector_ops import invoke
from connector_ops.environment import resources_for
from connector_ops.pipelines.cli import gc as gc_command

DOCS = Path(__file__).resolve().parents[1] / "docs" / "deployment.md"
POSTGRES = pytest.mark.parametrize("own_database_url", ["postgresql"], indirect=True)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home whose default stores (SQLite file, files folder) hold a virtual file and two platform files."""
    for name in list(os.environ):
        if name.startswith(("CONNECTOR_OPS_", "DAGSTER_HOME")):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    stores = resources_for(["platform_files", "virtual_files"], {"CONNECTOR_OPS_HOME": str(home)})
    pf = stores["platform_files"].add_bytes(b'[{"a": "1", "b": ""}, {"b": "x"}]', "kept.json").to_json()
    stores["platform_files"].add_bytes(b"\x00\xffbytes", "blob.bin", "application/octet-stream")
    invoke("etl.push", {"platformFile": pf}, stores)
    return home


def gc(env: dict[str, str], *args: str) -> tuple[str, str]:
    """gc's output and its notices (stderr without the warning that there is no DAGSTER_HOME)."""
    said = CliRunner().invoke(gc_command, ["--older-than", "0s", *args], env=env)
    assert said.exit_code == 0, said.output
    return said.stdout, "".join(line for line in said.stderr.splitlines(keepends=True) if "DAGSTER_HOME" not in line)


def test_gc_names_a_files_folder_the_settings_left(home):
    """CONNECTOR_OPS_FILES_BACKEND=database: the old platform files are 404s and gc counted 0, silent."""
    env = {"CONNECTOR_OPS_HOME": str(home)}
    assert gc(env, "--dry-run")[1] == ""  # the stores in use: nothing to say
    env["CONNECTOR_OPS_FILES_BACKEND"] = "database"
    folder = sorted(p.name for p in (home / "files").iterdir())
    for args in (["--dry-run"], []):
        out, err = gc(env, *args)
        assert re.fullmatch(
            rf"connector-ops: notice: the home's platform-file folder {re.escape(str(home / 'files'))} \(2 platform "
            r"file\(s\), [\d.]+ (bytes|KiB)\) is not the one the current settings use, so gc neither weighs nor "
            r"touches it; switching stores does not move files \(docs/deployment.md, Switching the stores\): move "
            r"what you need, then remove it yourself\n", err), err
        assert "0 platform file(s)" in out
    assert sorted(p.name for p in (home / "files").iterdir()) == folder  # untouched by the real gc
    [unused] = json.loads(gc(env, "--dry-run", "--json")[0])["unusedStores"]
    assert unused["kind"] == "platform-file folder" and unused["path"] == str(home / "files")
    assert unused["files"] == 2 and unused["bytes"] > 0


@POSTGRES
def test_gc_names_a_sqlite_store_the_settings_left(home, own_database_url):
    """CONNECTOR_OPS_DATABASE_URL moved to PostgreSQL: the home's virtual_files.db is named (its files folder,
    still the platform files' store, is not); on a database nothing was stored in yet too."""
    env = {"CONNECTOR_OPS_HOME": str(home), "CONNECTOR_OPS_DATABASE_URL": own_database_url}
    both = gc({**env, "CONNECTOR_OPS_FILES_BACKEND": "database"}, "--dry-run")[1].splitlines()
    assert len(both) == 2 and "virtual-file store" in both[0] and "platform-file folder" in both[1]
    before = (home / "virtual_files.db").stat().st_size
    for args in (["--dry-run"], []):
        _, err = gc(env, *args)
        [line] = err.splitlines()
        assert line.startswith(f"connector-ops: notice: the home's virtual-file store {home / 'virtual_files.db'} (")
        assert "is not the one the current settings use, so gc neither weighs nor touches it" in line
    assert (home / "virtual_files.db").stat().st_size == before


def documented_move() -> str:
    """The script of docs/deployment.md, *Switching the stores*."""
    section = DOCS.read_text().split("### Switching the stores", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@POSTGRES
def test_the_documented_move_copies_the_old_files(home, own_database_url):
    env = {**os.environ, "CONNECTOR_OPS_HOME": str(home), "CONNECTOR_OPS_DATABASE_URL": own_database_url,
           "CONNECTOR_OPS_FILES_BACKEND": "database"}
    old = resources_for(["platform_files", "virtual_files"], {"CONNECTOR_OPS_HOME": str(home)})
    [(old_vf, _)] = old["virtual_files"].inventory()
    old_rows = invoke("etl.query", {"virtualFileId": old_vf, "query": {}}, old)["result"]
    assert old_rows == [{"a": "1", "b": ""}, {"b": "x"}]  # "" and missing, kept apart
    moved = subprocess.run([sys.executable, "-c", documented_move()], env=env, capture_output=True, text=True,
                           timeout=300)
    assert moved.returncode == 0, moved.stderr
    ids = dict(re.findall(r"^(?:virtual|platform) file (\w+) -> (\w+)$", moved.stdout, re.MULTILINE))
    new = resources_for(["platform_files", "virtual_files"], env)
    assert invoke("etl.query", {"virtualFileId": ids[old_vf], "query": {}}, new)["result"] == old_rows
    for file_id, _ in old["platform_files"].inventory():
        was, now = old["platform_files"].describe(file_id), new["platform_files"].describe(ids[file_id])
        assert (now.name, now.content_type, now.size) == (was.name, was.content_type, was.size)
        assert new["platform_files"].read_bytes(now) == old["platform_files"].read_bytes(was)
    assert len(ids) == 3
