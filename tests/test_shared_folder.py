"""A home shared by a team, as docs/deployment.md ("Sharing a folder between users") describes it: a
set-group-id folder of the team's group, every process under umask 002. The code server (root here), an
analyst (another user, in the team besides a primary group of their own) and a run worker (a third user,
the team's group its own) each read what the others wrote and write after them: platform files, the SQLite
store, the local drive, the outbox.

Every file used to be made 0o600 (platform files, drive items, outbox messages) and the store and
``drive.db`` 0o644 with their ``-wal`` and ``-shm``: the analyst could neither read the code server's files
nor write the store."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from connector_ops import invoke
from connector_ops.environment import resources_for
from tests.conftest import clear_connector_environment
from tests.mail.conftest import message, send
from tests.other_user import ANALYST_GID, ANALYST_UID, TEAM_GID, WORKER_UID, as_root, as_user, shared_folder
from tests.test_file_modes import umask

CSV = b"id,name\n1,ada\n"


@pytest.fixture
def team_home(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``CONNECTOR_OPS_HOME`` in a folder the team shares (the store in it: the default SQLite file)."""
    clear_connector_environment(monkeypatch)
    with shared_folder() as folder:
        monkeypatch.setenv("CONNECTOR_OPS_HOME", str(folder / "home"))
        yield folder / "home"


def read_platform_file(descriptor: dict[str, Any]) -> bytes:
    with resources_for()["platform_files"].open(descriptor) as stream:
        return stream.read()


def ids(vf: str) -> list[str]:
    return [row["id"] for row in invoke("etl.query", {"virtualFileId": vf, "query": {}})["result"]]


def write_after_the_others(pulled: dict[str, Any], vf: str, drive_item: str, newest: str) -> dict[str, Any]:
    """What a user of the team does after the others: read their platform file and drive item, append to
    their virtual file, add a platform file, push it, upload it, pull the virtual file, send a message."""
    read = read_platform_file(pulled)
    downloaded = invoke("drive.download_file", {"fileId": drive_item})["platformFile"]
    invoke("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"id": newest, "name": "x"}}]})
    mine = resources_for()["platform_files"].add_bytes(CSV, f"from-{os.geteuid()}.csv").to_json()
    return {"read": read, "downloaded": read_platform_file(downloaded), "ids": ids(vf),
            "vf": invoke("etl.push", {"platformFile": mine})["virtualFileId"],
            "item": invoke("drive.upload_file", {"platformFile": mine})["fileId"],
            "pulled": invoke("etl.pull", {"virtualFileId": vf, "exportType": "csv",
                                          "exportName": "pulled.csv"})["platformFile"],
            "sent": send(message())}


@as_root
def test_a_team_shares_a_home_its_store_and_drive(team_home: Path) -> None:
    with umask(0o002):  # the code server, as root
        resources = resources_for()
        first = resources["platform_files"].add_bytes(CSV, "people.csv").to_json()
        vf = invoke("etl.push", {"platformFile": first}, resources)["virtualFileId"]
        item = invoke("drive.upload_file", {"platformFile": first}, resources)["fileId"]
        send(message(), resources)
    analyst = as_user(lambda: write_after_the_others(first, vf, item, "2"),
                      ANALYST_UID, ANALYST_GID, [TEAM_GID])
    assert (analyst["read"], analyst["downloaded"], analyst["ids"]) == (CSV, CSV, ["1", "2"])
    worker = as_user(lambda: write_after_the_others(analyst["pulled"], analyst["vf"], analyst["item"], "3"),
                     WORKER_UID, TEAM_GID)
    assert worker["read"].splitlines()[1:] == [b"1,ada", b"2,x"]
    assert (worker["downloaded"], worker["ids"]) == (CSV, ["1", "3"])
    again = as_user(lambda: write_after_the_others(worker["pulled"], worker["vf"], worker["item"], "4"),
                    ANALYST_UID, ANALYST_GID, [TEAM_GID])
    assert again["read"].splitlines()[1:] == [b"1,ada", b"3,x"]
    assert (again["downloaded"], again["ids"]) == (CSV, ["1", "4"])
    assert ids(vf) == ["1", "2"] and ids(analyst["vf"]) == ["1", "3"]  # and the code server reads them all
    messages = sorted((team_home / "outbox").iterdir())
    assert len(messages) == 4 and all(json.loads(m.read_bytes()) for m in messages)
    owners = {(path.stat().st_uid, path.stat().st_gid) for path in team_home.rglob("*")}
    assert {gid for _, gid in owners} == {TEAM_GID} and {uid for uid, _ in owners} >= {0, ANALYST_UID, WORKER_UID}
