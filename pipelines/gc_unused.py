"""The home's own stores that the settings no longer use, for ``connector-ops gc`` to name.

The default stores are ``$CONNECTOR_OPS_HOME/virtual_files.db`` and ``$CONNECTOR_OPS_HOME/files``. Moving to the
multi-host settings (``CONNECTOR_OPS_DATABASE_URL`` to PostgreSQL, ``CONNECTOR_OPS_FILES_BACKEND=database``) does
not move what they hold: the old files stay there, unread, and gc — which weighs only the stores in use — said
"0 removed" as if nothing were left. It now says what is left and where, and leaves it alone: those files may
still be wanted (``connector-ops store copy`` copies them: docs/deployment.md, *Switching the stores*), and a
store gc does not open is not one it may weigh.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connector_ops.kernel.atomic import SWEPT_STAMP
from connector_ops.kernel.disk import shown_size

#: the SQLite file's companions, which hold its most recent writes (WAL mode)
_SQLITE_COMPANIONS = ("", "-wal", "-shm")


@dataclass(frozen=True)
class UnusedStore:
    """A store of the home that the settings do not use, and what it holds."""

    kind: str  # "virtual-file store" or "platform-file folder"
    path: Path
    size: int  # bytes on disk
    entries: int | None = None  # files of a folder (None: a database)

    def notice(self) -> str:
        held = shown_size(self.size)
        if self.entries is not None:
            held = f"{self.entries} platform file(s), {held}"
        return (f"the home's {self.kind} {self.path} ({held}) is not the one the current settings use, so gc neither "
                "weighs nor touches it; switching stores does not move files: `connector-ops store copy --map FILE` "
                "copies them into the stores in use (docs/deployment.md, Switching the stores), then remove it "
                "yourself")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path), "bytes": self.size, "files": self.entries}


def _same(path: str | os.PathLike[str] | None, other: Path) -> bool:
    if path is None:
        return False
    with contextlib.suppress(OSError):
        return Path(path).expanduser().resolve() == other.resolve()
    return False


def unused_stores(home: Path, virtual_files: Any, platform_files: Any) -> list[UnusedStore]:
    """The non-empty ``virtual_files.db`` and ``files`` folder of ``home`` that ``virtual_files`` and
    ``platform_files`` (the stores the settings make) are not."""
    found = []
    database = home / "virtual_files.db"
    if database.is_file() and not _same(virtual_files.sqlite_file, database):
        size = sum(_size(Path(f"{database}{suffix}")) for suffix in _SQLITE_COMPANIONS)
        if size:
            found.append(UnusedStore("virtual-file store", database, size))
    folder = home / "files"
    in_use = platform_files.files_database_url is None and _same(platform_files.files_dir, folder)
    if folder.is_dir() and not in_use:
        held = [entry for entry in folder.iterdir() if entry.name != SWEPT_STAMP and entry.is_file()]
        if held:
            found.append(UnusedStore("platform-file folder", folder, sum(_size(entry) for entry in held),
                                     sum(1 for entry in held if entry.suffix == ".json")))
    return found


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # not there (no -wal), or gone meanwhile
        return 0
