"""pandas DataFrames in and out of virtual files, for ``%etl push --df`` and ``%etl pull --df``.

There is no second implementation of Push or Pull here: a DataFrame is written as CSV into a new
platform file (streamed in slices through :meth:`PlatformFileStore.create`, so a failure leaves no
file) and handed to the ``etl.push`` action; ``etl.pull`` exports a CSV/JSON platform file which is then
read into a DataFrame. The platform file in between is an implementation detail of the magic and is
deleted afterwards.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from connector_ops.display import MAX_ROWS, PREVIEW_BYTES
from connector_ops.kernel.progress import track
from connector_ops.magic_input import InputError
from connector_ops.resources.platform_files import PlatformFileStore

SLICE_ROWS = 50_000

RunAction = Callable[[str, dict[str, Any]], Any]


def _is_frame(value: Any) -> bool:
    return hasattr(value, "to_csv") and hasattr(value, "columns") and hasattr(value, "iloc")


def _with_named_index(df: Any) -> Any:
    """Keep a meaningful index (one with a name) as columns; drop the default 0…n-1 index."""
    names = [n for n in getattr(df.index, "names", [None]) if n is not None]
    return df.reset_index() if names else df


@contextlib.contextmanager
def frame_as_platform_file(df: Any, name: str, platform_files: PlatformFileStore) -> Iterator[dict[str, Any]]:
    """A temporary CSV platform file holding ``df`` (header row, comma, UTF-8), deleted on exit."""
    if not _is_frame(df):
        raise InputError(f"--df: expected a pandas DataFrame, got {type(df).__name__}", action="etl.push")
    df = _with_named_index(df)
    with platform_files.create(name, "text/csv") as sink, track(f"write {name}", len(df), "rows") as reporter:
        if len(df) == 0:
            sink.write(df.to_csv(index=False).encode("utf-8"))
        for start in range(0, len(df), SLICE_ROWS):
            part = df.iloc[start:start + SLICE_ROWS]
            sink.write(part.to_csv(index=False, header=start == 0, lineterminator="\n").encode("utf-8"))
            reporter.update(len(part))
    assert sink.descriptor is not None
    try:
        yield sink.descriptor.to_json()
    finally:
        platform_files.delete(sink.descriptor.id or "")


def push_frame(df: Any, name: str, platform_files: PlatformFileStore, run: RunAction,
               payload: Mapping[str, Any]) -> Any:
    """Run ``etl.push`` on ``df``: returns the action's output (``{"virtualFileId": …}``)."""
    extra = set(payload) - {"parameters"}
    if extra:
        raise InputError(f"with --df the platform file is the DataFrame; {', '.join(sorted(extra))} cannot be given",
                         action="etl.push")
    parameters = dict(payload.get("parameters") or {})
    clashing = set(parameters) & {"csvDelimiter", "useFirstRowAsSchema", "schema", "linesToIgnore", "encoding"}
    if clashing:
        raise InputError(f"with --df the CSV format is fixed; parameters {', '.join(sorted(clashing))} cannot be given",
                         action="etl.push")
    with frame_as_platform_file(df, name, platform_files) as descriptor:
        return run("etl.push", {"platformFile": descriptor, "parameters": {**parameters, "useFirstRowAsSchema": True}})


def read_frame(platform_files: PlatformFileStore, pf: Mapping[str, Any], parameters: Mapping[str, Any],
               *, nrows: int | None = None, cell_text: bool = False) -> Any:
    """A platform file exported by Pull (CSV or JSON) as a DataFrame."""
    import pandas as pd

    encoding = parameters.get("encoding") or "utf-8"
    text_options: dict[str, Any] = {"dtype": str, "keep_default_na": False} if cell_text else {}
    with platform_files.open(pf) as raw:
        if "json" in str(pf.get("contentType")) or str(pf.get("name", "")).endswith(".json"):
            frame = pd.read_json(io.TextIOWrapper(raw, encoding=encoding), orient="records",
                                 dtype=not cell_text)
            return frame.head(nrows) if nrows else frame
        header = 0 if parameters.get("addFirstRowAsSchema", True) else None
        return pd.read_csv(raw, sep=parameters.get("csvDelimiter") or ",", header=header, encoding=encoding,
                           nrows=nrows, **text_options)


def pull_frame(payload: Mapping[str, Any], platform_files: PlatformFileStore, run: RunAction) -> Any:
    """Run ``etl.pull`` and return the exported file as a DataFrame (the export itself is then deleted)."""
    payload = dict(payload)
    vf = payload.get("virtualFileId")
    payload.setdefault("exportType", "csv")
    payload.setdefault("exportName", f"{vf or 'virtual-file'}.{payload['exportType']}")
    output = run("etl.pull", payload)
    pf = output["platformFile"]
    try:
        with track(f"read {pf.get('name')}", None, "rows"):
            return read_frame(platform_files, pf, payload.get("parameters") or {})
    finally:
        platform_files.delete(pf.get("id") or "")


def file_preview(platform_files: PlatformFileStore) -> Callable[[Mapping[str, Any]], list[dict[str, Any]] | None]:
    """For display: the first rows of a small CSV/JSON file stored here (never fetched over the network)."""

    def preview(pf: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        kind = f"{pf.get('contentType')} {pf.get('name')}".lower()
        if "csv" not in kind and "json" not in kind:
            return None
        if platform_files.local_id(dict(pf)) is None or not isinstance(pf.get("size"), int):
            return None
        if pf["size"] > PREVIEW_BYTES:
            return None
        try:
            frame = read_frame(platform_files, pf, {}, nrows=MAX_ROWS, cell_text=True)
        except Exception:  # a preview is a courtesy: a file pandas cannot read is shown without one
            return None
        return frame.to_dict(orient="records")

    return preview
