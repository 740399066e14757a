"""What the Dagster UI shows next to an action's output, in Dagster's own vocabulary.

* a virtual file: ``dagster/row_count``, ``dagster/column_schema`` (a ``TableSchema``; stored cells are
  text, so every column is ``string``) and ``preview`` (a ``MetadataValue.table`` of the first rows);
  the UI's asset and run views read the two ``dagster/`` keys (row-count charts, the columns tab);
* a platform file: ``path`` (``MetadataValue.path``) when its bytes are on this machine, ``link`` (a URL)
  only when it can be opened: a remote link, or ours while the file server answers; ``size_bytes``. A
  remote link is stored as messages show it (``scheme://host/path``, :func:`link_shown`): its password or
  signature would otherwise sit in Dagster's event log, even when the input gave it through ``${env.…}``;
* a list of rows: ``count`` and a ``preview`` table;
* every output: ``duration_s`` (the action's wall time); transfers also ``bytes_in`` (what was read);
  ``read_virtual_file_ids`` / ``read_platform_files``: the stored files the action's input named (what
  ``connector-ops gc`` keeps for a job's latest successful run, however its input was given): ids, and
  links as :func:`link_shown` shows them (gc reads a link's last path segment, our file's id); and
  ``reads_recorded`` (:data:`READS_RECORDED`), which tells gc that a step without read keys read nothing.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping
from typing import Any

import dagster as dg
import httpx

from connector_ops.kernel.errors import NotFound, link_shown

PREVIEW_ROWS = 5
_CELL_LIMIT = 200
_PROBE_TIMEOUT_S = 0.5


def column_schema(columns: list[str]) -> dg.TableSchema:
    """Virtual-file cells are stored as text: every column is a ``string`` column."""
    return dg.TableSchema(columns=[dg.TableColumn(name, "string") for name in columns])


def _cell(value: Any) -> str | int | float | bool | None:
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= _CELL_LIMIT else text[: _CELL_LIMIT - 1] + "…"


def table_preview(rows: list[Mapping[str, Any]], columns: list[str] | None = None,
                  limit: int = PREVIEW_ROWS) -> dg.MetadataValue:
    """A ``MetadataValue.table`` of the first ``limit`` rows (every row gets every column)."""
    picked = [r for r in rows[:limit] if isinstance(r, Mapping)]
    names = columns or list(dict.fromkeys(k for r in picked for k in r))
    records = [dg.TableRecord({name: _cell(r.get(name)) for name in names}) for r in picked]
    return dg.MetadataValue.table(records, schema=column_schema(names))


def virtual_file_metadata(store: Any, vf_id: str) -> dict[str, Any]:
    """Row count, schema and preview of a virtual file, read in one snapshot."""
    count, columns, first = store.summary(vf_id, PREVIEW_ROWS)
    return {
        "virtual_file_id": dg.MetadataValue.text(vf_id),  # what `connector-ops gc` keeps for recent runs
        "dagster/row_count": dg.MetadataValue.int(count),
        "dagster/column_schema": column_schema(columns),
        "preview": table_preview(first, columns),
    }


@functools.lru_cache(maxsize=8)
def _server_answers(base_url: str) -> bool:
    """Whether the platform file server at ``base_url`` answers ``/health`` (asked once per process and
    URL: a link in the UI that leads nowhere is worse than none). Straight, as the store reaches its own server
    (``PlatformFileStore._served``), never through a proxy of the environment."""
    try:
        return httpx.get(base_url.rstrip("/") + "/health", timeout=_PROBE_TIMEOUT_S, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def platform_file_metadata(value: Mapping[str, Any], files: Any) -> dict[str, Any]:
    """Name, size, a local path when the bytes are here, and a link only where it can be opened."""
    meta: dict[str, Any] = {"name": dg.MetadataValue.text(str(value.get("name")))}
    if value.get("size") is not None:
        meta["size_bytes"] = dg.MetadataValue.int(int(value["size"]))
    link = str(value.get("link") or "")
    local = files.local_id(value) if files is not None and link else None
    if local is not None:
        meta["platform_file_id"] = dg.MetadataValue.text(local)  # what `connector-ops gc` keeps for recent runs
        with contextlib.suppress(NotFound):  # removed meanwhile: the other metadata still holds
            meta["path"] = dg.MetadataValue.path(str(files.data_path(local)))
        if _server_answers(files.file_server_url):  # today's link: one made under an earlier URL leads nowhere
            meta["link"] = dg.MetadataValue.url(files.link_for(local))
    elif link.startswith(("http://", "https://")):
        shown = link_shown(link)  # a signed link without its signature opens nothing: then text, not a URL
        meta["link"] = dg.MetadataValue.url(link) if shown == link else dg.MetadataValue.text(shown)
    return meta


def stored_platform_file(value: Mapping[str, Any], files: Any) -> dict[str, Any]:
    """A platform file as event metadata may keep it: our own file's link as it is (an asset's downstream
    reads it back, :func:`connector_ops.ops.assets.latest_location`), any other link without its password
    and query (:func:`link_shown`)."""
    link = value.get("link")
    if not isinstance(link, str) or (files is not None and files.local_id(value) is not None):
        return dict(value)
    return {**value, "link": link_shown(link)}


#: output fields whose string value is a virtual file id (Validate's are ids when its content was one)
VIRTUAL_FILE_FIELDS = frozenset({"virtualFileId", "rejectionFileId", "rejectsFileId", "validated", "rejected"})


def output_metadata(field: str, value: Any, resources: Mapping[str, Any]) -> dict[str, Any]:
    """What the UI shows next to one output value."""
    if field in VIRTUAL_FILE_FIELDS and isinstance(value, str):
        store = resources.get("virtual_files")
        return virtual_file_metadata(store, value) if store is not None else {}
    if isinstance(value, Mapping) and "link" in value:
        return platform_file_metadata(value, resources.get("platform_files"))
    if isinstance(value, list):
        meta: dict[str, Any] = {"count": dg.MetadataValue.int(len(value))}
        if value and isinstance(value[0], Mapping):
            meta["preview"] = table_preview(value)
        return meta
    if isinstance(value, str) and value.startswith(("http://", "https://")):
        return {"link": dg.MetadataValue.url(value)}
    return {}


def bytes_in(payload: Mapping[str, Any]) -> int | None:
    """The size of the platform file(s) an action read (Push, Upload, mail attachments), when known."""
    files = [payload.get("platformFile")]
    files += [a.get("platformFile") for a in payload.get("attachments") or [] if isinstance(a, Mapping)]
    sizes = [f.get("size") for f in files if isinstance(f, Mapping)]
    known = [int(s) for s in sizes if isinstance(s, int)]
    return sum(known) if known else None


#: metadata keys of the virtual files / platform files (their ``id`` and ``link``) a step's input named
READ_VIRTUAL_FILES, READ_PLATFORM_FILES = "read_virtual_file_ids", "read_platform_files"
#: metadata key of the platform files a YAML step's resolver stored (its ``${file:…}`` files)
STORED_PLATFORM_FILES = "stored_platform_file_ids"
#: metadata key every output and failure of an action step carries (``True``): the step recorded what it read,
#: so no read key means it read no stored file. Steps of connector-ops before this key (read keys came with
#: commit 6797436, the key later) recorded nothing, or not always: ``connector-ops gc`` cannot weigh their
#: runs' inputs and keeps what they may have read (:mod:`connector_ops.pipelines.gc`)
READS_RECORDED = "reads_recorded"
#: input fields holding row data or a filter, not references: never searched (an Iterate's or Validate's
#: ``content`` names a virtual file when it is a string)
_NOT_REFERENCES = frozenset({"content", "request"})
_APPENDED_ROW = frozenset({"virtualFileId", "content"})


def files_read(payload: Any, vfs: set[str] | None = None, pfs: set[str] | None = None) -> tuple[set[str], set[str]]:
    """The virtual file ids and platform files (``id``, and ``link`` without password or query) ``payload`` names: every
    ``virtualFileId`` (Join's sides and Append Rows' rows too), a string ``content``, every ``platformFile``.

    Recorded because nothing else says what a run read: a YAML job's literal input is its default config (a
    scheduled run stores ``{}``), a ``${env.…}`` input is resolved inside the step. Row data is not searched,
    so the cost is one pass over an input's fields (and over Append Rows' rows, not their values)."""
    vfs = set() if vfs is None else vfs
    pfs = set() if pfs is None else pfs
    if isinstance(payload, Mapping):
        for key, value in payload.items():
            if key in ("virtualFileId", "content") and isinstance(value, str):
                vfs.add(value)
            elif key == "platformFile" and isinstance(value, Mapping):
                if isinstance(file_id := value.get("id"), str):
                    pfs.add(file_id)
                if isinstance(link := value.get("link"), str):  # gc reads its last path segment: our file's id
                    pfs.add(link_shown(link))
            elif key not in _NOT_REFERENCES and isinstance(value, Mapping | list):
                files_read(value, vfs, pfs)
    elif isinstance(payload, list):
        for item in payload:
            if type(item) is dict and item.keys() <= _APPENDED_ROW and isinstance(vf := item.get("virtualFileId"), str):
                vfs.add(vf)  # an Append Rows row, the one list that may be long: no call per row
            elif isinstance(item, Mapping | list):
                files_read(item, vfs, pfs)
    return vfs, pfs


def read_metadata(payload: Mapping[str, Any]) -> dict[str, Any]:
    """What a step read, as metadata: the marker :data:`READS_RECORDED`, and the read keys when its input named
    a stored file."""
    vfs, pfs = files_read(payload)
    meta: dict[str, Any] = {READS_RECORDED: dg.MetadataValue.bool(True)}
    if vfs:
        meta[READ_VIRTUAL_FILES] = dg.MetadataValue.json(sorted(vfs))
    if pfs:
        meta[READ_PLATFORM_FILES] = dg.MetadataValue.json(sorted(pfs))
    return meta


def run_metadata(payload: Mapping[str, Any], seconds: float) -> dict[str, Any]:
    """Metadata of the call itself, added to each of its outputs: duration, bytes read, files read."""
    meta: dict[str, Any] = {"duration_s": dg.MetadataValue.float(round(seconds, 3))}
    read = bytes_in(payload)
    if read is not None:
        meta["bytes_in"] = dg.MetadataValue.int(read)
    return {**meta, **read_metadata(payload)}


#: metadata key of an asset materialisation saying where its data is, by output field
LOCATION_KEYS = {"virtualFileId": "virtual_file_id", "validated": "virtual_file_id", "platformFile": "platform_file"}


def materialization_metadata(field: str, value: Any, resources: Mapping[str, Any]) -> dict[str, Any]:
    """An asset materialisation's metadata: the output's standard metadata plus where the data is."""
    location = (dg.MetadataValue.json(stored_platform_file(value, resources.get("platform_files")))
                if isinstance(value, Mapping) else dg.MetadataValue.text(str(value)))
    return {**output_metadata(field, value, resources), LOCATION_KEYS[field]: location}
