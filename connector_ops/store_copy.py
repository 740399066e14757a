"""Copy the virtual files and platform files of one pair of stores into another (``connector-ops store copy``).

Moving a deployment from the default stores (``$CONNECTOR_OPS_HOME/virtual_files.db``, ``$CONNECTOR_OPS_HOME/files``)
to PostgreSQL and ``CONNECTOR_OPS_FILES_BACKEND=database`` moves no file (docs/deployment.md, *Switching the
stores*). The script the docs gave held each virtual file whole in memory (a 20 GB file could not be copied),
printed its ids only, and a re-run after a failure copied everything again. Here:

- a virtual file goes batch by batch (``scan_arrow`` into ``create_from_arrow``: one snapshot read, one
  transaction written), a platform file in 1 MiB pieces, so memory does not grow with a file;
- each copy records the id it copies in the destination, in the copy's own commit (a virtual file's in
  ``cop_vf_origin``, a platform file's in its stored descriptor: the stores' ``copies()``), so a copy is
  either there and recorded, or not there at all. Its ``old id -> new id`` line is then appended to the
  map file (:class:`IdMap`, CSV, what users read) and flushed to disk. A re-run skips every file the
  destination holds a copy of, recorded there or named in the map (a map of a version that recorded
  nothing), and adds to the map the lines a stop cut: a stop between a copy's commit and its line (a
  kill, a power cut) made that copy unnamed, and the next run copied the file again. So a run stopped
  anywhere loses nothing, copies nothing twice, and the next one finishes the job;
- an asset's data (``asset:<key>``) is not copied: running its job again rebuilds it.

Ids are made by the store that writes a file, so every copy has a new id.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from connector_ops.kernel.errors import ConnectorOpsError, InvalidInput

VIRTUAL, PLATFORM = "virtual_file", "platform_file"
#: the map file's first line
MAP_HEADER = ["kind", "old_id", "new_id"]
#: a platform file's bytes are copied this many at a time
CHUNK = 1 << 20


class IdMap:
    """The map file: a CSV of ``kind,old_id,new_id`` lines (``kind``: ``virtual_file`` or ``platform_file``),
    one appended and flushed to disk after each copy is committed (and by a re-run, together, for the copies
    the destination recorded whose lines a stop cut); a later line for an old id wins."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.ids: dict[tuple[str, str], str] = {}
        if self.path.exists():
            self._read()

    def _read(self) -> None:
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise InvalidInput("--map", f"cannot read {self.path}: {exc.strerror or exc}") from None
        if data and not data.endswith(b"\n"):  # a line cut by a crash: dropped; the run writes it again (copies())
            data = data[:data.rfind(b"\n") + 1]
            with self.path.open("r+b") as handle:
                handle.truncate(len(data))
        rows = list(csv.reader(io.StringIO(data.decode("utf-8", "replace"))))
        if rows and rows[0] != MAP_HEADER:
            raise InvalidInput("--map", f"{self.path} is not a map this command wrote (its first line is not "
                               f"{','.join(MAP_HEADER)}): give a new file, or the map of an earlier copy")
        for row in rows[1:]:
            if len(row) == 3 and row[0] in (VIRTUAL, PLATFORM):
                self.ids[(row[0], row[1])] = row[2]

    def get(self, kind: str, old_id: str) -> str | None:
        return self.ids.get((kind, old_id))

    def record(self, kind: str, old_id: str, new_id: str) -> None:
        """Append one line and make it durable before the next copy starts."""
        self.record_all([(kind, old_id, new_id)])

    def record_all(self, lines: list[tuple[str, str, str]]) -> None:
        """Append ``(kind, old_id, new_id)`` lines and make them durable together: one ``fsync`` for the lines a
        stop cut, which a re-run writes again, not one each (nothing is copied between them)."""
        if not lines:
            return
        with self.path.open("a", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            if handle.tell() == 0:
                writer.writerow(MAP_HEADER)
            writer.writerows(lines)
            handle.flush()
            os.fsync(handle.fileno())
        for kind, old_id, new_id in lines:
            self.ids[(kind, old_id)] = new_id


@dataclass
class Item:
    """One file of the source and what became of it."""

    kind: str  # VIRTUAL or PLATFORM
    old_id: str
    size: int | None = None  # rows of a virtual file (as listed; once copied, the rows copied), a platform file's bytes
    estimated: bool = False  # ``size`` is PostgreSQL's estimate of the rows, not a count
    status: str = "to copy"  # "to copy", "copied", "already copied", "asset (not copied)", "failed"
    new_id: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "oldId": self.old_id, "newId": self.new_id, "status": self.status,
                **({"rows" if self.kind == VIRTUAL else "bytes": self.size} if self.size is not None else {}),
                **({"rowsEstimated": True} if self.estimated else {}),
                **({"error": self.error} if self.error else {})}


@dataclass
class CopyResult:
    """What ``store copy`` did (or, with ``dry_run``, would do), file by file."""

    items: list[Item] = field(default_factory=list)
    dry_run: bool = False
    skipped_stores: list[str] = field(default_factory=list)  # "virtual files" / "platform files": same store

    def count(self, kind: str, status: str) -> int:
        return sum(1 for item in self.items if item.kind == kind and item.status == status)

    @property
    def failed(self) -> list[Item]:
        return [item for item in self.items if item.status == "failed"]

    def to_json(self) -> dict[str, Any]:
        return {"dryRun": self.dry_run, "files": [item.to_json() for item in self.items],
                "sameStores": self.skipped_stores}


def same_virtual_store(source: Any, dest: Any) -> bool:
    """Whether two virtual-file stores are one database, however their URLs are spelled."""
    from connector_ops.resources.virtual_files.engines import same_database

    return same_database(str(source.database_url), str(dest.database_url))


def same_platform_store(source: Any, dest: Any) -> bool:
    """Whether two platform-file stores keep their files in one place (a folder, or a database)."""
    from connector_ops.resources.virtual_files.engines import same_database

    if source.files_database_url is None and dest.files_database_url is None:
        return _same_path(source.files_dir, dest.files_dir)
    if source.files_database_url is not None and dest.files_database_url is not None:
        return same_database(str(source.files_database_url), str(dest.files_database_url))
    return False


def _same_path(a: str, b: str) -> bool:
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def plan(source: dict[str, Any], dest: dict[str, Any], id_map: IdMap | None, kinds: tuple[str, ...], *,
         estimate: bool = False) -> list[Item]:
    """Every file of the source stores of ``kinds``, oldest first, sized, and marked as already copied where
    the destination holds a copy of it: one it recorded (:func:`_recorded`), or one ``id_map`` names (a copy
    gc removed since is copied again). A virtual file's rows: with ``estimate`` (a dry run), as PostgreSQL
    estimates them where it does, else counted; without, for the copy's progress, as the store tells them at
    no read of its own (``progress_rows``: PostgreSQL's estimate or none, SQLite's count)."""
    from connector_ops.resources.virtual_files.catalog import ASSET_FILE_PREFIX

    items: list[Item] = []
    if VIRTUAL in kinds and source["virtual_files"].stored():
        held, recorded = _recorded(dest["virtual_files"])
        for vf_id, _ in source["virtual_files"].inventory():
            rows, exact = (source["virtual_files"].row_count(vf_id, estimate=True) if estimate
                           else source["virtual_files"].progress_rows(vf_id))
            item = Item(VIRTUAL, vf_id, rows, estimated=rows is not None and not exact)
            if vf_id.startswith(ASSET_FILE_PREFIX):
                item.status = "asset (not copied)"
            _mark_copied(item, id_map, held, recorded)
            items.append(item)
    if PLATFORM in kinds and source["platform_files"].stored():
        held, recorded = _recorded(dest["platform_files"])
        for file_id, _ in source["platform_files"].inventory():
            item = Item(PLATFORM, file_id)
            with contextlib.suppress(ConnectorOpsError):  # a descriptor gone meanwhile: its copy says so
                item.size = source["platform_files"].describe(file_id).size
            _mark_copied(item, id_map, held, recorded)
            items.append(item)
    return items


def _recorded(store: Any) -> tuple[set[str], dict[str, str]]:
    """The ids ``store`` holds, and the copies it recorded by the id each copies, asked without making it (a
    dry run into a store not made yet has none)."""
    if not store.stored():
        return set(), {}
    listed, copies = store.inventory_and_copies()  # a folder's descriptors read once
    return {file_id for file_id, _ in listed}, copies


def _mark_copied(item: Item, id_map: IdMap | None, held: set[str], recorded: dict[str, str]) -> None:
    named = id_map.get(item.kind, item.old_id) if id_map is not None else None
    new_id = named if named in held else recorded.get(item.old_id)
    if new_id is not None and new_id in held:
        item.status, item.new_id = "already copied", new_id


def copy_virtual_file(source: Any, dest: Any, vf_id: str, rows: int | None = None) -> tuple[str, int]:
    """A copy of ``vf_id`` (rows in order, columns in order, a missing value missing) made in ``dest``, read
    and written a batch at a time, its progress shown by rows (of ``rows``, perhaps an estimate), ``vf_id``
    recorded as its origin in its transaction; its new id and the rows it holds, counted as they were
    written (no ``count(*)``, a read of the whole table, before or after)."""
    from connector_ops.frame_streams import peeked
    from connector_ops.kernel.progress import reported, track

    copied = _Rows()
    columns, batches = source.scan_arrow(vf_id)
    with contextlib.closing(batches), track(f"copy {vf_id}", rows, "rows") as reporter:  # closed: the snapshot ends
        if not columns:  # rows that hold no value: Arrow has no batch for them
            batches.close()
            columns, tuples = source.scan_tuples(vf_id)
            with contextlib.closing(tuples):
                new_id = dest.create_from_batches(columns, copied.counting(tuples, len), copied_from=vf_id)
        else:
            size, batches = peeked(batches)  # the load's size, measured on the first batches, as push_frame's
            batches = copied.counting(reported(batches, reporter, _arrow_rows), _arrow_rows)
            new_id = dest.create_from_arrow(columns, batches, size=size, copied_from=vf_id)
    return new_id, copied.count


def _arrow_rows(batch: Any) -> int:
    return batch.num_rows


class _Rows:
    """The rows of the batches handed to the destination, counted as they go: once the copy is committed,
    every one of them is written, so the count is the copy's."""

    def __init__(self) -> None:
        self.count = 0

    def counting(self, batches: Iterable[Any], rows_of: Callable[[Any], int]) -> Iterator[Any]:
        for batch in batches:
            self.count += rows_of(batch)
            yield batch


def copy_platform_file(source: Any, dest: Any, file_id: str) -> str:
    """A copy of the platform file ``file_id`` (its bytes, name and content type) in ``dest``, streamed, with
    ``file_id`` recorded as its origin; its new id, its progress shown by bytes."""
    from connector_ops.kernel.progress import reading_with_progress, track

    descriptor = source.describe(file_id)
    with track(f"copy {descriptor.name}", descriptor.size) as reporter, source.open_stored(file_id) as data, \
            dest.create(descriptor.name, descriptor.content_type, copied_from=file_id) as sink:
        shutil.copyfileobj(reading_with_progress(data, reporter, CHUNK), sink, CHUNK)
    assert sink.descriptor is not None
    return sink.descriptor.id


def copy_all(source: dict[str, Any], dest: dict[str, Any], items: list[Item], id_map: IdMap,
             told: Callable[[Item], None]) -> None:
    """Copy every item still to copy, recording each in ``id_map`` as soon as it is committed; ``told`` hears
    of each item done. A file's own problem (gone from the source, a value the destination cannot hold: a
    4xx) fails that file and the others go on; anything else (the destination unreachable or full) stops
    here, every copy before it kept and named in the map. First the map names each copy the destination
    recorded that it does not: one whose line a stop cut."""
    id_map.record_all([(item.kind, item.old_id, item.new_id) for item in items
                       if item.status == "already copied" and item.new_id is not None
                       and id_map.get(item.kind, item.old_id) != item.new_id])
    for item in items:
        if item.status != "to copy":
            continue
        try:
            if item.kind == VIRTUAL:
                item.new_id, item.size = copy_virtual_file(source["virtual_files"], dest["virtual_files"],
                                                           item.old_id, item.size)
                item.estimated = False
            else:
                item.new_id = copy_platform_file(source["platform_files"], dest["platform_files"], item.old_id)
        except ConnectorOpsError as exc:
            if exc.status >= 500:
                raise
            item.status, item.error = "failed", str(exc)
        else:
            id_map.record(item.kind, item.old_id, item.new_id)
            item.status = "copied"
        told(item)

