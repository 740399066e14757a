"""Whether a folder can be made and written here, and the operating system's reason when it cannot — asked
before anything is written, so that a home nobody can write is one configuration error at start, not a
``PermissionError`` at every step."""

from __future__ import annotations

import errno
import os


def user() -> str:
    """The user the process runs as, with its uid (the one whose rights count, not ``$USER``)."""
    try:
        import pwd  # POSIX only

        uid = os.geteuid()
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, AttributeError, KeyError):
        return os.environ.get("USERNAME") or os.environ.get("USER") or "this process's user"


def unwritable(folder: str) -> str | None:
    """Why ``folder`` cannot be written, or made when it does not exist yet (its nearest existing parent
    is what decides), in the operating system's words; ``None`` when it can. Makes nothing."""
    path = os.path.abspath(folder)
    verb = "written"
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return os.strerror(errno.ENOENT)
        path, verb = parent, "created"
    if not os.path.isdir(path):
        return f"cannot be {verb}: {path} is not a folder"
    if os.access(path, os.W_OK | os.X_OK):
        return None
    code = errno.EROFS if read_only(path) else errno.EACCES
    whom = f" for user {user()}" if code == errno.EACCES else ""
    where = "" if path == os.path.abspath(folder) else f" in {path}"
    return f"cannot be {verb}: {os.strerror(code)}{whom}{where}"


def read_only(path: str) -> bool:
    """Whether ``path``'s file system is mounted read-only (root's writes are refused there too)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False
