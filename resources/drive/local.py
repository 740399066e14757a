"""LocalDriveResource: a drive in a folder on disk, so every drive action works with no Google account.

Layout under ``drive_dir``: ``drive.db`` (SQLite, WAL) holds the tree — ids, names, kinds, parents, sharing
and each item's change counter — and ``items/<id>`` holds each file's bytes. Ids are random URL-safe strings
generated here; a user-supplied name is only ever a column value, never part of a path. Bytes are written to
a temporary file and renamed into place before the row that makes them visible is committed, and rows change
in one transaction per action, so a failed action leaves nothing half-written. The root folder has the id
``root`` and the name ``my-drive`` (both accepted as ids).
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from pydantic import PrivateAttr

from connector_ops.kernel.atomic import atomic_write, sweep_due, sweep_leftovers, sweep_unclaimed
from connector_ops.kernel.disk import DEFAULT_MIN_FREE_DISK
from connector_ops.kernel.errors import InvalidInput, NotFound
from connector_ops.kernel.fence import check_fence
from connector_ops.kernel.file_modes import make_database_file
from connector_ops.kernel.progress import track
from connector_ops.kernel.resource import Resource
from connector_ops.resources.drive.base import (
    FOLDER_MIME,
    ROOT_ALIASES,
    Download,
    DriveItem,
    Grant,
    copy_name,
    exported,
    listing_order,
)
from connector_ops.resources.platform_files import utc_timestamp
from connector_ops.resources.virtual_files.sqlite_faults import sqlite_fault

CHUNK = 1 << 20
ROOT = "root"
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    is_folder INTEGER NOT NULL,
    mime_type TEXT NOT NULL,
    parent TEXT REFERENCES items(id),
    size INTEGER NOT NULL DEFAULT 0,
    modified TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS items_parent ON items(parent);
CREATE TABLE IF NOT EXISTS permissions (
    item_id TEXT NOT NULL REFERENCES items(id),
    type TEXT NOT NULL,
    role TEXT NOT NULL,
    grantee TEXT NOT NULL,
    PRIMARY KEY (item_id, type, grantee)
);
"""


def _add_version_column(conn: sqlite3.Connection) -> None:
    """A drive created before items had a ``version`` (their change counter) gets the column, each row at 1.

    Checked without a lock at every connection (a cheap ``PRAGMA``); only a drive that lacks the column takes
    the write lock and checks again, so two processes opening an old drive at once add it once."""
    def missing() -> bool:
        return "version" not in {row["name"] for row in conn.execute("PRAGMA table_info(items)")}

    if missing():
        with _immediate(conn):
            if missing():
                conn.execute("ALTER TABLE items ADD COLUMN version INTEGER NOT NULL DEFAULT 1")


@contextlib.contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """One ``BEGIN IMMEDIATE`` transaction: committed when the body ends, rolled back when it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        check_fence("the local drive's change")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class LocalDriveResource(Resource):
    """A folder that behaves like a drive (spec 4.A) for demos, notebooks and offline tests."""

    drive_dir: str
    """Folder holding the local drive (its items and their metadata)."""
    link_base: str | None = None
    """Base of shared links (``<link_base>/<id>``; default: file:// URLs of the stored bytes)."""
    min_free_disk: int = DEFAULT_MIN_FREE_DISK
    """Bytes of free disk space its writes leave on the disk of ``drive_dir`` (``CONNECTOR_OPS_MIN_FREE_DISK``;
    0: no check): a write that would go below stops with a 500 and leaves nothing."""

    def single_host(self) -> str | None:
        return f"the local drive is the folder {self.drive_dir} of one host; use CONNECTOR_OPS_DRIVE_BACKEND=google"

    # -- storage ----------------------------------------------------------------------------------
    _swept: bool = PrivateAttr(default=False)

    @property
    def root(self) -> Path:
        root = Path(self.drive_dir)
        (root / "items").mkdir(parents=True, exist_ok=True)
        if not self._swept:  # the drive's start: what writers killed mid-write left, once an hour per folder
            self._swept = True
            if sweep_due(root):
                sweep_leftovers(root / "items")
                self._sweep_unlisted(root / "items")
        return root

    def _sweep_unlisted(self, items: Path) -> None:
        """The bytes of items whose writer died between putting them in place and committing their row (an
        upload renames the one, then commits the other)."""
        with self._db() as conn:
            listed = {row[0] for row in conn.execute("SELECT id FROM items")}
        sweep_unclaimed(items, lambda name, _present: name in listed)

    def _blob(self, item_id: str) -> Path:
        return self.root / "items" / item_id

    @contextlib.contextmanager
    def _db(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        """One connection per action; writes run in one ``BEGIN IMMEDIATE`` transaction. SQLite's faults of the
        host (a full disk) are named with ``drive.db``'s folder, as the store's are (:mod:`.sqlite_faults`)."""
        path = self.root / "drive.db"
        try:
            with self._connected(path, write) as conn:
                yield conn
        except sqlite3.Error as exc:
            fault = sqlite_fault(exc, str(path), self.min_free_disk)
            if fault is None:
                raise
            raise fault from None

    @contextlib.contextmanager
    def _connected(self, path: Path, write: bool) -> Iterator[sqlite3.Connection]:
        make_database_file(path)  # with the umask's mode, which its -wal and -shm take (not SQLite's 0o644)
        conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        conn.row_factory = sqlite3.Row
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.executescript(SCHEMA)
            _add_version_column(conn)
            conn.execute("INSERT OR IGNORE INTO items (id, name, is_folder, mime_type, parent, size, modified) "
                         "VALUES (?, 'my-drive', 1, ?, NULL, 0, ?)", (ROOT, FOLDER_MIME, utc_timestamp()))
            if write:
                with _immediate(conn):
                    yield conn
            else:
                yield conn
        finally:
            conn.close()

    @staticmethod
    def _key(item_id: str | None) -> str:
        if not item_id or item_id in ROOT_ALIASES:
            return ROOT
        return item_id

    def _item(self, conn: sqlite3.Connection, item_id: str | None, field: str) -> sqlite3.Row:
        key = self._key(item_id)
        row = conn.execute("SELECT * FROM items WHERE id = ?", (key,)).fetchone() if _ID.fullmatch(key) else None
        if row is None:
            raise NotFound(f"{field}: no drive item with id {item_id!r}")
        return row

    def _folder(self, conn: sqlite3.Connection, folder_id: str | None, field: str) -> str:
        row = self._item(conn, folder_id, field)
        if not row["is_folder"]:
            raise InvalidInput(field, "is not a folder")
        return row["id"]

    @staticmethod
    def _new_id() -> str:
        return secrets.token_urlsafe(18)

    def _insert(self, conn: sqlite3.Connection, item_id: str, name: str, folder: bool, mime: str,
                parent: str, size: int = 0) -> None:
        conn.execute("INSERT INTO items (id, name, is_folder, mime_type, parent, size, modified) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (item_id, name, int(folder), mime, parent, size, utc_timestamp()))

    def _new_blob(self, item_id: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        """Write bytes under a temporary name; they appear at ``items/<id>`` only if the block succeeds."""
        return atomic_write(self._blob(item_id), min_free_disk=self.min_free_disk)

    def _discard(self, item_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._blob(item_id).unlink()

    # -- actions ----------------------------------------------------------------------------------
    def rename(self, item_id: str, name: str) -> None:
        with self._db(write=True) as conn:
            row = self._item(conn, item_id, "id")
            if row["id"] == ROOT:
                raise InvalidInput("id", "the drive root cannot be renamed")
            conn.execute("UPDATE items SET name = ?, modified = ?, version = version + 1 WHERE id = ?",
                         (name, utc_timestamp(), row["id"]))

    def create_file(self, name: str, folder_id: str | None, mime_type: str) -> str:
        new_id = self._new_id()
        with self._new_blob(new_id):
            pass
        try:
            with self._db(write=True) as conn:
                self._insert(conn, new_id, name, False, mime_type, self._folder(conn, folder_id, "folderId"))
        except BaseException:
            self._discard(new_id)
            raise
        return new_id

    def create_folder(self, name: str, parent_id: str | None) -> str:
        new_id = self._new_id()
        with self._db(write=True) as conn:
            self._insert(conn, new_id, name, True, FOLDER_MIME, self._folder(conn, parent_id, "folderId"))
        return new_id

    def move(self, item_id: str, folder_id: str) -> None:
        with self._db(write=True) as conn:
            row = self._item(conn, item_id, "id")
            if row["id"] == ROOT:
                raise InvalidInput("id", "the drive root cannot be moved")
            target = self._folder(conn, folder_id, "folderId")
            if row["is_folder"] and target in self._subtree(conn, row["id"]):
                raise InvalidInput("folderId", "is the folder being moved or inside it")
            conn.execute("UPDATE items SET parent = ?, modified = ?, version = version + 1 WHERE id = ?",
                         (target, utc_timestamp(), row["id"]))

    @staticmethod
    def _subtree(conn: sqlite3.Connection, item_id: str) -> list[str]:
        rows = conn.execute(
            "WITH RECURSIVE t(id) AS (SELECT ? UNION ALL SELECT items.id FROM items JOIN t ON items.parent = t.id) "
            "SELECT id FROM t", (item_id,)).fetchall()
        return [r[0] for r in rows]

    def _remove(self, conn: sqlite3.Connection, ids: list[str]) -> None:
        for item_id in reversed(ids):  # children after their parents in the CTE: delete leaves first
            conn.execute("DELETE FROM permissions WHERE item_id = ?", (item_id,))
            conn.execute("DELETE FROM items WHERE id = ?", (item_id,))

    def delete_file(self, file_id: str) -> None:
        with self._db(write=True) as conn:
            row = self._item(conn, file_id, "fileId")
            if row["is_folder"]:
                raise InvalidInput("fileId", "is a folder; use Delete Folder to delete a folder and its contents")
            self._remove(conn, [row["id"]])
        self._discard(row["id"])

    def delete_folder(self, folder_id: str) -> None:
        with self._db(write=True) as conn:
            row = self._item(conn, folder_id, "folderId")
            if not row["is_folder"]:
                raise InvalidInput("folderId", "is not a folder; use Delete File to delete a file")
            if row["id"] == ROOT:
                raise InvalidInput("folderId", "the drive root cannot be deleted")
            ids = self._subtree(conn, row["id"])
            self._remove(conn, ids)
        for item_id in ids:  # bytes go once the rows are gone; a crash here leaves only unreachable blobs
            self._discard(item_id)

    def share(self, item_id: str, grants: list[Grant]) -> str:
        with self._db(write=True) as conn:
            row = self._item(conn, item_id, "id")
            if row["id"] == ROOT:  # as on Google Drive, where My Drive itself cannot be shared
                raise InvalidInput("id", "the drive root cannot be shared; share a folder inside it")
            for g in grants:
                conn.execute("INSERT INTO permissions VALUES (?, ?, ?, ?) ON CONFLICT (item_id, type, grantee) "
                             "DO UPDATE SET role = excluded.role",
                             (row["id"], g.type, g.role, g.email or g.domain or ""))
        return self.link_for(row["id"])

    def link_for(self, item_id: str) -> str:
        if self.link_base:
            return f"{self.link_base.rstrip('/')}/{item_id}"
        return self._blob(item_id).resolve().as_uri()

    def grants(self, item_id: str) -> list[Grant]:
        """The sharing of an item (what Create a shared link recorded)."""
        with self._db() as conn:
            key = self._item(conn, item_id, "id")["id"]
            rows = conn.execute("SELECT type, role, grantee FROM permissions WHERE item_id = ? ORDER BY rowid",
                                (key,)).fetchall()
        return [Grant(t, r, email=g if t in ("user", "group") else None, domain=g if t == "domain" else None)
                for t, r, g in rows]

    def copy_file(self, file_id: str, folder_id: str | None, name: str | None,
                  keep_permissions: bool) -> tuple[str, str]:
        with self._db() as conn:
            source = self._item(conn, file_id, "fileId")
            if source["is_folder"]:
                raise InvalidInput("fileId", "is a folder; Drive copies files only")
            target = self._folder(conn, folder_id, "folderId")
        new_id, new_name = self._new_id(), copy_name(source["name"], name)
        with self._new_blob(new_id) as sink, self._blob(source["id"]).open("rb") as src:
            shutil.copyfileobj(src, sink, CHUNK)
        try:
            with self._db(write=True) as conn:
                self._item(conn, source["id"], "fileId")  # still there
                self._insert(conn, new_id, new_name, False, source["mime_type"], target, source["size"])
                if keep_permissions:
                    conn.execute("INSERT INTO permissions SELECT ?, type, role, grantee FROM permissions "
                                 "WHERE item_id = ?", (new_id, source["id"]))
        except BaseException:
            self._discard(new_id)
            raise
        return new_id, new_name

    def upload(self, stream: IO[bytes], name: str, content_type: str, size: int | None,
               folder_id: str | None) -> str:
        with self._db() as conn:
            parent = self._folder(conn, folder_id, "folderId")
        new_id, written = self._new_id(), 0
        with track(f"upload {name}", size, "B") as reporter, self._new_blob(new_id) as sink:
            while data := stream.read(CHUNK):
                sink.write(data)
                written += len(data)
                reporter.update(len(data))
        try:
            with self._db(write=True) as conn:
                self._insert(conn, new_id, name, False, content_type, self._folder(conn, parent, "folderId"), written)
        except BaseException:
            self._discard(new_id)
            raise
        return new_id

    @contextlib.contextmanager
    def download(self, file_id: str) -> Iterator[Download]:
        with self._db() as conn:
            row = self._item(conn, file_id, "fileId")
        if row["is_folder"]:
            raise InvalidInput("fileId", "is a folder; folders cannot be downloaded")
        # a native document is named and typed as Google's export of it; its content stays empty here
        name, content_type = exported(row["name"], row["mime_type"]) or (row["name"], row["mime_type"])
        with self._blob(row["id"]).open("rb") as handle:
            yield Download(name, content_type, row["size"], iter(lambda: handle.read(CHUNK), b""))

    def list_folder(self, folder_id: str | None) -> list[DriveItem]:
        with self._db() as conn:
            parent = self._folder(conn, folder_id, "folderId")
            rows = conn.execute("SELECT id, name, is_folder, modified, size, version FROM items WHERE parent = ?",
                                (parent,)).fetchall()
        return sorted((DriveItem(r["id"], r["name"], "folder" if r["is_folder"] else "file",
                                 f"{r['modified']}/{r['size']}", str(r["version"])) for r in rows),
                      key=listing_order)

    def check_token(self) -> dict[str, object]:
        return {"valid": True, "credentials": "none (local drive)", "expiresInSeconds": None}
