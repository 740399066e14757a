"""The modes of the files connector-ops makes: those ``open(path, "w")`` would give them (the umask's on a new
file, the old permission bits on a file written again), secrets ``0o600`` (:mod:`connector_ops.kernel.file_modes`).

Each test sets the umask it runs under and puts the worker's back (xdist workers are processes of their own)."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from connector_ops import invoke
from connector_ops.drive.cli import save_env_line
from connector_ops.environment import resources_for
from connector_ops.kernel.atomic import TEMP_PREFIX, atomic_write
from connector_ops.kernel.notices import warnings_to
from connector_ops.pipelines.dsl.digest_cache import CACHE_NAME, DigestCache
from connector_ops.pipelines.instance import LOCK_FILE
from tests.conftest import clear_connector_environment
from tests.mail.conftest import message, send
from tests.other_user import ANALYST_GID, ANALYST_UID, TEAM_GID, as_root, as_user, in_child, shared_folder
from tests.refused import refuse_mode_changes


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    """The block runs under ``mask``; the process's umask is put back after it."""
    before = os.umask(mask)
    try:
        yield
    finally:
        os.umask(before)


def mode(path: str | os.PathLike[str]) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean connector environment (in os.environ) on a home of the test's, with a SQLite store."""
    clear_connector_environment(monkeypatch)
    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CONNECTOR_OPS_DATABASE_URL", f"sqlite:///{tmp_path / 'home' / 'virtual_files.db'}")
    return tmp_path / "home"


@pytest.mark.parametrize("mask", [0o002, 0o022, 0o077])
def test_the_files_actions_write_get_the_mode_of_the_umask(home: Path, mask: int) -> None:
    """A platform file and its descriptor, a local drive item's bytes, an outbox message: 0o666 less the
    umask, as ``open`` makes a file (all were 0o600 whatever the umask)."""
    with umask(mask):
        resources = resources_for()
        platform_file = resources["platform_files"].add_bytes(b"id,name\n1,a\n", "people.csv")
        item = invoke("drive.upload_file", {"platformFile": platform_file.to_json()}, resources)["fileId"]
        send(message(), resources)
    expected = 0o666 & ~mask
    files_dir = home / "files"
    assert mode(files_dir / platform_file.id) == expected
    assert mode(files_dir / f"{platform_file.id}.json") == expected
    assert mode(home / "drive" / "items" / item) == expected
    (outbox_message,) = (home / "outbox").iterdir()
    assert mode(outbox_message) == expected


def test_a_file_written_again_keeps_its_permission_bits(home: Path, tmp_path: Path) -> None:
    """The DSL's digest cache, written again by the next load, keeps the mode an administrator gave it (the
    group's write included), whatever the umask of the process writing it; it used to become 0o600."""
    home.mkdir()
    data = tmp_path / "data.csv"
    data.write_text("id\n1\n")
    cache_file = home / CACHE_NAME
    with umask(0o022):
        cache = DigestCache(cache_file)
        cache.digest(data)
        cache.save()
        assert mode(cache_file) == 0o644
        cache_file.chmod(0o664)
        again = DigestCache(cache_file)
        again.digest(data)
        again.save()
    assert mode(cache_file) == 0o664
    cache_file.chmod(0o640)
    with umask(0o002), atomic_write(cache_file) as handle:
        handle.write(b"{}")
    assert mode(cache_file) == 0o640


@pytest.mark.parametrize("before", [0o600, 0o640])
def test_a_file_written_again_is_never_more_open_while_it_is_written(tmp_path: Path, before: int) -> None:
    """Its temporary file is made with the old mode, not widened to the umask's first: a reader that opened it
    meanwhile could read on what the final mode withholds."""
    target = tmp_path / "kept"
    target.write_bytes(b"old")
    target.chmod(before)
    with umask(0), atomic_write(target) as handle:
        (temporary,) = (p for p in tmp_path.iterdir() if p.name.startswith(TEMP_PREFIX))
        assert mode(temporary) == before
        handle.write(b"new")
    assert mode(target) == before and target.read_bytes() == b"new"


@pytest.mark.parametrize("mask", [0o000, 0o002, 0o022])
def test_secrets_stay_0600(tmp_path: Path, mask: int) -> None:
    """``drive login --save``'s dotenv file is 0o600 whatever the umask, new or written again, even when it
    was readable before."""
    dotenv = tmp_path / ".env"
    with umask(mask):
        save_env_line(dotenv, "GOOGLE_REFRESH_TOKEN", "1//first")
        assert mode(dotenv) == 0o600
        dotenv.chmod(0o644)
        save_env_line(dotenv, "GOOGLE_REFRESH_TOKEN", "1//second")
    assert mode(dotenv) == 0o600
    assert dotenv.read_text() == "GOOGLE_REFRESH_TOKEN=1//second\n"


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_secret_whose_mode_cannot_be_set_fails_and_leaves_nothing_open(tmp_path: Path) -> None:
    """On a file system that refuses to change modes, a secret that cannot be made ``0o600`` (umask 0o277 makes
    it 0o400) fails its write, naming the file, the file there untouched, no temporary file left and no
    descriptor: the one of the temporary file stayed open when the mode was refused (one per failed write)."""
    dotenv = tmp_path / ".env"
    dotenv.write_bytes(b"OLD=1\n")

    def write_secrets() -> tuple[list[str], int]:
        errors, before = [], descriptors()
        for _ in range(5):
            try:
                with umask(0o277), atomic_write(dotenv, file_mode=0o600) as handle:
                    handle.write(b"NEW=1\n")
            except PermissionError as exc:
                errors.append(str(exc))
        return errors, descriptors() - before

    errors, left_open = in_child(write_secrets, refuse_mode_changes)
    assert left_open == 0
    assert len(errors) == 5 and "mode 0600" in errors[0] and str(dotenv) in errors[0]
    assert [p.name for p in tmp_path.iterdir()] == [".env"] and dotenv.read_bytes() == b"OLD=1\n"


def test_a_file_written_again_on_a_file_system_refusing_modes(tmp_path: Path) -> None:
    """Each rewrite called ``fchmod``, and on a file system that refuses it (CIFS without Unix extensions, some
    FUSE) every rewrite failed, which used to succeed. A file made with the mode it had needs no call; one the
    umask made narrower keeps that mode, with a warning: no one gains a right."""
    same, narrower = tmp_path / "same", tmp_path / "narrower"
    for path, before in ((same, 0o644), (narrower, 0o664)):
        path.write_bytes(b"old")
        path.chmod(before)

    def write_again() -> list[str]:
        said: list[str] = []
        with umask(0o022), warnings_to(said.append):
            for path in (same, narrower):
                with atomic_write(path) as handle:
                    handle.write(b"new")
        return said

    [said] = in_child(write_again, refuse_mode_changes)
    assert (same.read_bytes(), mode(same)) == (b"new", 0o644)
    assert (narrower.read_bytes(), mode(narrower)) == (b"new", 0o644)
    assert said.startswith(f"{narrower} is written with mode 0644, not the 0664 it had")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["narrower", "same"]


def sqlite_files(folder: Path, name: str) -> dict[str, int]:
    """The modes of the database ``name`` in ``folder`` and of its ``-wal`` and ``-shm``, by name."""
    return {path.name: mode(path) for path in folder.iterdir() if path.name.startswith(name)}


@pytest.mark.parametrize("mask", [0o000, 0o002])
def test_a_new_store_and_drive_database_get_the_umask_s_mode_and_their_logs_too(home: Path, mask: int) -> None:
    """The virtual-file store's SQLite file and the local drive's ``drive.db``, made by their first action, are
    0o666 less the umask, and so are their ``-wal`` and ``-shm`` (SQLite gives them the database's mode).
    SQLite made them 0o644 less the umask: under umask 002 the group could read the store, not write it."""
    with umask(mask):
        resources = resources_for()
        platform_file = resources["platform_files"].add_bytes(b"id,name\n1,a\n", "people.csv")
        vf = invoke("etl.push", {"platformFile": platform_file.to_json()}, resources)["virtualFileId"]
        invoke("drive.upload_file", {"platformFile": platform_file.to_json()}, resources)
        assert invoke("etl.query", {"virtualFileId": vf, "query": {"id": "1"}}, resources)["result"]
        expected = 0o666 & ~mask
        assert sqlite_files(home, "virtual_files.db") == {
            "virtual_files.db": expected, "virtual_files.db-wal": expected, "virtual_files.db-shm": expected}
        with resources["drive"]._db():  # a connection open: its -wal and -shm are there
            assert sqlite_files(home / "drive", "drive.db") == {
                "drive.db": expected, "drive.db-wal": expected, "drive.db-shm": expected}


def test_the_dagster_home_s_lock_file_can_be_taken_by_the_group(tmp_path: Path) -> None:
    """The lock file ``pipeline run``, ``gc`` and the ``%pipeline`` magic take on DAGSTER_HOME is 0o666 less the
    umask (it was made 0o644: under umask 002 the group sharing the home could not open it to lock it)."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    subprocess.run([sys.executable, "-c", "from connector_ops.pipelines.instance import home_instance\n"
                                          "home_instance().get_runs(limit=1)"],
                   env={**os.environ, "DAGSTER_HOME": str(home)}, umask=0o002, check=True, timeout=120)
    assert mode(home / LOCK_FILE) == 0o664


def owner(path: Path) -> tuple[int, int]:
    found = os.stat(path)
    return found.st_uid, found.st_gid


@as_root
def test_a_file_root_writes_again_keeps_its_owner_and_group_but_a_secret_stays_root_s(home: Path,
                                                                                       tmp_path: Path) -> None:
    """``sudo connector-ops …`` writing again a user's file (the digest cache of their home) leaves it theirs,
    as a write in place would (it became root's, which the user could no longer write in place); a secret
    (the dotenv of ``drive login --save``) keeps only the group: it is never handed to another user."""
    home.mkdir()
    data = tmp_path / "data.csv"
    data.write_text("id\n1\n")
    cache_file, dotenv = home / CACHE_NAME, home / ".env"
    user = ANALYST_UID
    with umask(0o022):
        cache = DigestCache(cache_file)
        cache.digest(data)
        cache.save()
        save_env_line(dotenv, "GOOGLE_REFRESH_TOKEN", "1//first")
        for path in (cache_file, dotenv):
            os.chown(path, user, TEAM_GID)
        cache_file.chmod(0o660)
        cache = DigestCache(cache_file)
        cache.digest(data)
        cache.save()
        save_env_line(dotenv, "GOOGLE_REFRESH_TOKEN", "1//second")
    assert (owner(cache_file), mode(cache_file)) == ((user, TEAM_GID), 0o660)
    assert (owner(dotenv), mode(dotenv)) == ((0, TEAM_GID), 0o600)


@as_root
def test_a_user_writing_a_file_of_their_group_again_keeps_the_group() -> None:
    """A user in the team (primary group their own) writing again a ``0o660`` file of the team's, in a folder
    that is not set-group-id: it stays the team's, as a write in place keeps it (it became the user's primary
    group's, and the rest of the team could no longer read it)."""
    with shared_folder(ANALYST_GID, 0o777) as folder:
        cache_file, data = folder / CACHE_NAME, folder / "data.csv"
        data.write_text("id\n1\n")
        cache = DigestCache(cache_file)
        cache.digest(data)
        cache.save()
        os.chown(cache_file, ANALYST_UID, TEAM_GID)
        cache_file.chmod(0o660)

        def save_again() -> None:
            again = DigestCache(cache_file)
            again.digest(data)
            again.save()

        as_user(save_again, ANALYST_UID, ANALYST_GID, [TEAM_GID])
        assert (owner(cache_file), mode(cache_file)) == ((ANALYST_UID, TEAM_GID), 0o660)


@as_root
@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_link_where_root_writes_again_gives_the_new_file_nothing_of_its_target(tmp_path: Path, link: str) -> None:
    """A member of a shared folder's group puts a link where root will write again, to a file of another owner:
    root's new file took that file's owner, group and mode (``os.stat`` followed the link). It is root's, with
    the umask's mode, and the link's target is untouched (the rename replaces the link)."""
    target, path = tmp_path / "theirs", tmp_path / "digests.json"
    target.write_bytes(b"theirs")
    os.chown(target, ANALYST_UID, TEAM_GID)
    target.chmod(0o660)
    (path.symlink_to if link == "symbolic" else path.hardlink_to)(target)
    with umask(0o022), atomic_write(path) as handle:
        handle.write(b"root's")
    assert not path.is_symlink() and path.read_bytes() == b"root's"
    assert (owner(path), mode(path)) == ((0, tmp_path.stat().st_gid), 0o644)
    assert (target.read_bytes(), owner(target), mode(target)) == (b"theirs", (ANALYST_UID, TEAM_GID), 0o660)
