"""Drive calls in worker processes made by ``fork`` (a multiprocessing pool on Linux): each child signs in on
its own connection and creates under ids it reserved itself, whatever its parent did before the fork."""

from __future__ import annotations

import os
from typing import Any

import pytest

from connector_ops.kernel.errors import ConnectorError
from connector_ops.resources.drive.google import GoogleDriveResource
from connector_ops.session import invoke
from tests.drive.support import Drive, google_env
from tests.forked import in_forked_workers
from tests.servers.fake_drive import FakeDrive

#: the resource the children of :func:`_create_with` use (set in the parent before the fork)
_GIVEN: dict[str, Any] = {}


def _create(args: tuple[str, int]) -> tuple[int, str | None, str | None]:
    """A child's folder create through the process session."""
    parent, i = args
    try:
        return i, invoke("drive.create_folder", {"name": f"child-{i}", "folderId": parent})["folderId"], None
    except ConnectorError as exc:
        return i, None, str(exc)


def _create_with(args: tuple[str, int]) -> tuple[int, str | None, str | None]:
    """A child's folder create with a resource its parent built (and used) before the fork."""
    parent, i = args
    try:
        made = invoke("drive.create_folder", {"name": f"child-{i}", "folderId": parent}, _GIVEN)
        return i, made["folderId"], None
    except ConnectorError as exc:
        return i, None, str(exc)


def _in_children(work: Any, parent: str, n: int = 16) -> list[tuple[int, str | None, str | None]]:
    return in_forked_workers(work, [(parent, i) for i in range(n)], processes=4)


def _check(results: list[tuple[int, str | None, str | None]], listed: list[dict[str, Any]]) -> None:
    names = {item["id"]: item["name"] for item in listed}
    assert [err for _, _, err in results if err] == []
    assert {i: names.get(got) for i, got, _ in results} == {i: f"child-{i}" for i, _, _ in results}
    assert len(names) == len(results)


def test_forked_workers_invoking_through_the_process_session_create_their_own_folders(
        clean_env: dict, fake: FakeDrive, monkeypatch: pytest.MonkeyPatch) -> None:
    google_env(fake, monkeypatch)
    parent = invoke("drive.create_folder", {"name": "parent"})["folderId"]  # signed in, ids reserved, kept alive
    results = _in_children(_create, parent)
    _check(results, invoke("drive.list", {"folderId": parent})["content"])  # the parent's client still works


def test_forked_workers_given_the_parents_resource_create_their_own_folders(google: Drive) -> None:
    parent = google.run("drive.create_folder", {"name": "parent"})["folderId"]
    _GIVEN.clear()
    _GIVEN.update(google.resources)
    try:
        results = _in_children(_create_with, parent)
    finally:
        _GIVEN.clear()
    _check(results, google.run("drive.list", {"folderId": parent})["content"])
    assert google.drive.http.client.is_closed is False


def test_a_conflict_on_a_first_attempt_is_not_taken_for_our_own_success(google: Drive) -> None:
    """Only a retry of this call can meet its own earlier create: a 409 to the first attempt means the id is
    someone else's, and the call fails rather than answer with that item's id."""
    drive = google.drive
    assert isinstance(drive, GoogleDriveResource)
    taken = google.run("drive.create_folder", {"name": "someone else's"})["folderId"]
    drive._new_id()  # reserves this process's ids
    drive._ids[1].append(taken)  # the next create reserves an id already used (as a forked twin's was)
    with pytest.raises(ConnectorError) as raised:
        google.run("drive.create_folder", {"name": "mine"})
    assert raised.value.status == 409
    names = [item["name"] for item in google.run("drive.list", {})["content"]]
    assert sorted(names) == ["someone else's"]


def test_a_forked_child_does_not_close_its_parents_client(google: Drive) -> None:
    google.run("drive.list", {})
    client = google.drive.http.client
    pid = os.fork()
    if pid == 0:  # the child gets a client of its own, then closes the resource, as a worker's shutdown would
        own = google.drive.http.client
        google.drive.close()
        os._exit(0 if own is not client else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert not client.is_closed
    assert google.run("drive.list", {}) == {"content": []}  # and the parent goes on with it
