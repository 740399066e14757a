"""The forked children of tests/other_user.py, which the tests of files shared between users run their work in."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.other_user import ANALYST_GID, ANALYST_UID, as_root, as_user, in_child


def test_a_child_that_never_answers_is_killed_and_its_test_fails(tmp_path: Path) -> None:
    """A child waiting for a lock another thread held at the fork (here: held by this one) never answers: the
    parent's read waited for it for ever, and the whole run with it. It is killed after the timeout, and the
    test fails naming the child."""
    held = threading.Lock()
    pid_file = tmp_path / "pid"

    def wait_for_the_lock() -> None:
        pid_file.write_text(str(os.getpid()))
        held.acquire()

    with held, pytest.raises(pytest.fail.Exception, match=r"gave no answer within 2 s and was killed"):
        in_child(wait_for_the_lock, timeout=2)
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists()  # killed, and reaped


@as_root
def test_a_child_as_another_user_answers() -> None:
    assert as_user(lambda: (os.getuid(), os.getgid(), os.getgroups(), os.umask(0)),
                   ANALYST_UID, ANALYST_GID, umask=0o027) == (ANALYST_UID, ANALYST_GID, [], 0o027)
