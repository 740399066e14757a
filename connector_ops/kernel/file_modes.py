"""The modes of the files connector-ops makes: the ones ``open(path, "w")`` would give them.

A data team often shares a folder between users — the code server and run workers as one, the file server or
the analysts as another, in one group, with umask 002 and a setgid folder (docs/deployment.md, "Sharing a
folder between users"). That works only if each file is made as ``open`` makes it: ``0o666`` less the
process's umask when new, and, when written again, with the permission bits it had (a regular file with no
other link: a symbolic link, or a file linked in from elsewhere, at the path is replaced by a new file,
:func:`replaced`). A file put in place by a
rename is a new file, though: its temporary file was made ``0o600`` (``tempfile.mkstemp``), and so was every
platform file, drive blob, outbox message and digest cache, and every file written again became ``0o600``.
SQLite makes a new database ``0o644`` less the umask (its compiled default) and gives its ``-wal``, ``-shm``
and journals the database's mode: with umask 002 the group could read a store but not write it.

The umask is never read (``os.umask`` sets it as it reads it, racing every other thread that makes a file):
a file is made with :data:`NEW_FILE_MODE` and the kernel takes the umask off.

A mode is set (``fchmod``) only where the file made has not got it already, which is seldom: some file systems
refuse to change modes (CIFS without Unix extensions, many FUSE file systems; others accept and ignore it), and
every rewrite on them failed once each called ``fchmod``. Where a mode the file needs cannot be set, a secret's
(``file_mode``: ``0o600``) fails the write, naming the file; a file written again keeps the mode it was made
with if that is narrower than its old one (the umask took bits off), with a warning (:mod:`.notices`): the
group may lose a right it had, no one gains one. One the file system made wider fails the write too.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from connector_ops.kernel.notices import warn

#: what ``open(path, "w")`` asks for; the kernel takes the umask off
NEW_FILE_MODE = 0o666
#: the permission bits a file written again keeps (not set-user-id and the like, which a write clears)
PERMISSION_BITS = 0o777


def create_new(path: str | os.PathLike[str], mode: int = NEW_FILE_MODE) -> int:
    """A descriptor (read-write) of a file made at ``path`` now, ``mode`` less the umask;
    :class:`FileExistsError` if anything is there (a symbolic link included: never followed)."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def make_database_file(path: str | os.PathLike[str]) -> None:
    """Make the empty file of a new SQLite database at ``path`` as ``open`` would (0o666 less the umask), before
    SQLite first opens it; a file already there (another process made it first) is left as it is.

    SQLite would make it ``0o644`` less the umask, whatever the umask allows, and its ``-wal``, ``-shm`` and
    journals take the database file's mode (SQLite sets it on them whatever the umask, and as root gives them
    the database's owner): made here, a group that may write the database may write those too. An empty file
    is a valid empty database. One that cannot be made here (no such folder, no right to write it) is left to
    SQLite, whose error names the cause (:mod:`connector_ops.resources.virtual_files.cannot_open`)."""
    with contextlib.suppress(OSError):
        os.close(create_new(path))


def replaced(path: str | os.PathLike[str]) -> os.stat_result | None:
    """The file at ``path`` now, which a rename to it replaces and whose owner, group and mode the new file
    takes (:func:`take_over`); ``None`` (the new file is made as a new one) when nothing is there, or what is
    there is not a regular file of its own. Not a symbolic link, never followed: in a shared folder a member of
    the group can put one where root will write again, and root's new file took the owner, group and mode of
    whatever it pointed at (the rename replaces the link, never its target). Nor a file with other hard links:
    another user's file linked in, whose owner root's new file would take."""
    try:
        found = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return found if stat.S_ISREG(found.st_mode) and found.st_nlink == 1 else None


def creation_mode(previous: os.stat_result | None, file_mode: int | None) -> int:
    """The mode to make a file with that will replace ``previous`` (``None``: a new file) and is to end
    ``file_mode`` (``None``: as ``open`` would). Never wider than the file will end: a reader that opened it
    in between keeps what it opened, and must not see bytes a narrower mode withholds."""
    if file_mode is not None:
        return file_mode
    if previous is not None:
        return previous.st_mode & PERMISSION_BITS
    return NEW_FILE_MODE


def take_over(fd: int, previous: os.stat_result | None, file_mode: int | None,
              target: str | os.PathLike[str]) -> None:
    """Give the file open at ``fd`` (made with :func:`creation_mode`, to be put at ``target``) the owner and mode
    it is to end with, before any byte is written: the group (and owner) of the file it replaces (``previous``)
    where the writer may give them (:func:`_keep_owner`); ``file_mode`` exactly when given (secrets: ``0o600``,
    whatever the umask); else the permission bits of the file it replaces, as a write in place keeps them; else
    the umask's (nothing to do). Each only where the file has not got it already (:func:`_set_mode`)."""
    if previous is not None:
        _keep_owner(fd, previous, secret=file_mode is not None)
    if file_mode is not None or previous is not None:  # after any chown, which may clear bits
        _set_mode(fd, creation_mode(previous, file_mode), target, exact=file_mode is not None)


def _set_mode(fd: int, wanted: int, target: str | os.PathLike[str], *, exact: bool) -> None:
    """Give the file open at ``fd`` the permission bits ``wanted``, unless it has them. A file system that
    refuses (an error, or a mode unchanged after it said yes) fails the write when the mode must be ``wanted``
    (``exact``: a secret's) or when the file has a bit ``wanted`` withholds; else the file keeps the narrower
    mode it was made with, and a warning says so (the module's docstring)."""
    has = stat.S_IMODE(os.fstat(fd).st_mode) & PERMISSION_BITS
    if has == wanted:
        return
    refusal = None
    try:
        os.fchmod(fd, wanted)
    except OSError as exc:
        refusal = exc
    else:
        has = stat.S_IMODE(os.fstat(fd).st_mode) & PERMISSION_BITS
        if has == wanted:
            return
    reason = refusal.strerror if refusal is not None else "the file system ignored it"
    if exact or has & ~wanted:
        raise OSError(refusal.errno if refusal is not None else errno.EPERM,
                      f"the file system refused to give the file mode {wanted:04o} ({reason}); it would be "
                      f"{has:04o}", os.fspath(target)) from refusal
    warn(f"{os.fspath(target)} is written with mode {has:04o}, not the {wanted:04o} it had: the file system "
         f"refused to change it ({reason})")


def _keep_owner(fd: int, previous: os.stat_result, *, secret: bool) -> None:
    """Give the new file the group of the one it replaces, and, when the writer is root, its owner — as a write
    in place keeps them — so far as the writer may: a user gives a file only a group they belong to; one
    outside the old group leaves the new file theirs (in a setgid folder, the folder's group anyway).

    Without it, a file written again by a rename was the writer's: a team member's write of a ``0o660`` file
    took it from the group, and ``sudo connector-ops …`` left the files it wrote again in a user's home to
    root. A secret (``file_mode`` given) is never handed to another user: it stays the writer's, with the old
    group only."""
    found = os.fstat(fd)
    if not secret and previous.st_uid != found.st_uid:
        try:
            os.fchown(fd, previous.st_uid, previous.st_gid)
            return
        except OSError:  # not root (or a file system without owners): the group at least
            pass
    if previous.st_gid != found.st_gid:
        with contextlib.suppress(OSError):
            os.fchown(fd, -1, previous.st_gid)
