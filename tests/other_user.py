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

A child forked from a test's process (an xdist worker, with threads of its own) may inherit a lock another
thread held at the fork, and wait for it for ever: a child that has not answered within :data:`CHILD_SECONDS` is
killed, and its test fails saying so, instead of the run hanging on it.

A test's own ``tmp_path`` is under root's ``0o700`` folder, which another user cannot reach: a shared folder
is made in the system's temporary folder instead, and removed after the test."""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import shutil
import signal
import tempfile
import time
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


#: how long a forked child is waited for before it is taken for hung and killed: a child of a multi-threaded
#: process (an xdist worker, its checkpoint thread) may inherit a lock another thread held at the fork, and wait
#: for it for ever; the parent's read of its answer waited as long, and the whole run with it
CHILD_SECONDS = 120.0


def as_user(work: Callable[[], T], uid: int, gid: int, extra_groups: Sequence[int] = (), umask: int = 0o002,
            timeout: float = CHILD_SECONDS) -> T:
    """``work()`` run in a forked child of this process that is user ``uid`` (primary group ``gid``, no other
    group than ``extra_groups``) with ``umask``; its result (pickled back), or the test fails with the child's
    traceback (:func:`in_child`)."""

    def become() -> None:
        os.setgroups(list(extra_groups))
        os.setgid(gid)
        os.setuid(uid)
        os.umask(umask)

    return in_child(work, become, f"as uid {uid} (groups {gid}, {list(extra_groups)})", timeout)


def in_child(work: Callable[[], T], prepare: Callable[[], None] = lambda: None, who: str = "in a child",
             timeout: float = CHILD_SECONDS) -> T:
    """``work()`` run in a forked child of this process after ``prepare()`` (which makes it another user, or
    takes something from it); its result (pickled back), or the test fails with the child's traceback. A
    child that has not answered within ``timeout`` seconds is killed and the test fails saying so."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's
        status = 1
        try:
            os.close(read)
            try:
                prepare()
                answer: tuple[str, object] = ("done", work())
            except BaseException:
                answer = ("failed", traceback.format_exc())
            with os.fdopen(write, "wb") as out:
                pickle.dump(answer, out)
            status = 0
        finally:
            os._exit(status)  # never the parent's atexit nor pytest's teardown
    os.close(write)
    try:
        received = _answer(read, time.monotonic() + timeout)
    finally:
        os.close(read)
    if received is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(f"{who}: the child (pid {pid}) gave no answer within {timeout:g} s and was killed (a lock "
                    "held at the fork by another thread of this process, which the child waits for for ever?)")
    _, status = os.waitpid(pid, 0)
    assert received and status == 0, f"{who}: the child ended with status {status} and no answer"
    kind, value = pickle.loads(received)
    if kind == "failed":
        pytest.fail(f"{who}:\n{value}")
    return value  # type: ignore[return-value]


def _answer(read: int, deadline: float) -> bytes | None:
    """Everything written to the pipe ``read`` until its writer closes it, or ``None`` if that is not by
    ``deadline`` (monotonic)."""
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([read], [], [], left)[0]:
            return None
        chunk = os.read(read, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
