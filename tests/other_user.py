"""Other users on this host, for the tests of files shared between users (tests/test_file_modes.py,
tests/test_shared_folder.py), made from root as the suite runs.

A new process of another user cannot start Python here: the interpreter and its standard library may sit in
root's ``0o700`` home (pyenv's ``/root/.pyenv``), so ``subprocess.run(…, user=…)`` (as tests/postgres_server.py
starts PostgreSQL's own binaries) fails with "Permission denied". :func:`as_user` forks the test's process
instead, and the child becomes the other user (its uid, groups and umask) before it runs the work: the
modules the work needs are those root already loaded doing the same (a fork inherits them), and what the
child still imports comes from the project and its virtual environment, which every user may read. A forked
child is a real way to run connector-ops (Celery's prefork pool, multiprocessing): kernel/forks.py makes it
build its own connections. Users and groups are numbers: the kernel needs no name for them.

A test's own ``tmp_path`` is under root's ``0o700`` folder, which another user cannot reach: a shared folder
is made in the system's temporary folder instead, and removed after the test."""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")

#: the group a team shares
TEAM_GID = 4242
#: an analyst's own group, their primary one
ANALYST_GID = 4343
#: two users of the team, neither root (the system's nobody, and one without a name)
ANALYST_UID, WORKER_UID = 65534, 4321

#: the tests switch users: only root may (the suite runs as root)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root, as the suite runs")


@contextlib.contextmanager
def shared_folder(gid: int = TEAM_GID, mode: int = 0o2775) -> Iterator[Path]:
    """A folder as a team shares one: group ``gid``, group-writable and set-group-id (what is made in it takes
    its group), in a folder any user may reach."""
    folder = Path(tempfile.mkdtemp(prefix="connector-ops-shared-"))
    try:
        os.chown(folder, -1, gid)
        folder.chmod(mode)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def as_user(work: Callable[[], T], uid: int, gid: int, extra_groups: Sequence[int] = (), umask: int = 0o002) -> T:
    """``work()`` run in a forked child of this process that is user ``uid`` (primary group ``gid``, no other
    group than ``extra_groups``) with ``umask``; its result (pickled back), or the test fails with the child's
    traceback."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's
        status = 1
        try:
            os.close(read)
            try:
                os.setgroups(list(extra_groups))
                os.setgid(gid)
                os.setuid(uid)
                os.umask(umask)
                answer: tuple[str, object] = ("done", work())
            except BaseException:
                answer = ("failed", traceback.format_exc())
            with os.fdopen(write, "wb") as out:
                pickle.dump(answer, out)
            status = 0
        finally:
            os._exit(status)  # never the parent's atexit nor pytest's teardown
    os.close(write)
    with os.fdopen(read, "rb") as answers:
        received = answers.read()
    _, status = os.waitpid(pid, 0)
    assert received and status == 0, f"the child as uid {uid} ended with status {status} and no answer"
    kind, value = pickle.loads(received)
    if kind == "failed":
        pytest.fail(f"as uid {uid} (groups {gid}, {list(extra_groups)}):\n{value}")
    return value  # type: ignore[return-value]
