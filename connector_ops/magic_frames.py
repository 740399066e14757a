"""DataFrames in and out of virtual files for ``%etl push --df`` and ``%etl pull --df``, and previews of
CSV/JSON platform files for display.

The frames go through Arrow (:mod:`connector_ops.frames`, also behind ``connector_ops.push_frame`` and
``pull_frame``): no CSV file in between, a missing value stays missing, errors are the actions' own.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any

from connector_ops.display import OPTIONS, PREVIEW_BYTES
from connector_ops.etl.json_readers import is_json, is_ndjson
from connector_ops.etl.models import PullInput, PullParameters
from connector_ops.etl.push_parquet import is_parquet
from connector_ops.etl.tsv import csv_delimiter, is_csv
from connector_ops.frames import frame_from, frame_into, run_with_store
from connector_ops.magic_input import InputError
from connector_ops.registry import get_action, parse_input
from connector_ops.resources.platform_files import PlatformFileStore

RunAction = Callable[[str, dict[str, Any]], Any]


def push_frame(df: Any, resources: Mapping[str, Any], payload: Mapping[str, Any]) -> Any:
    """``%etl push --df``: ``df`` (pandas, polars or pyarrow) into a new virtual file through Arrow;
    returns Push's output (``{"virtualFileId": …}``)."""
    extra = set(payload) - {"parameters"}
    if extra:
        raise InputError(f"with --df the platform file is the DataFrame; {', '.join(sorted(extra))} cannot be given",
                         action="etl.push")
    parameters = payload.get("parameters") or {}
    if not isinstance(parameters, Mapping):
        raise InputError(f"parameters: must be an object, got {type(parameters).__name__}", action="etl.push")
    if parameters:  # each reads a file (its delimiter, lines, encoding, bad rows), and the frame is no file
        raise InputError(f"parameters.{sorted(parameters)[0]}: does not apply to --df, whose DataFrame is the "
                         "data itself; remove the parameters", action="etl.push")
    vf_id = run_with_store("etl.push", resources, lambda store: frame_into(store, df, "--df"))
    return {"virtualFileId": vf_id}


def pull_frame(payload: Mapping[str, Any], resources: Mapping[str, Any]) -> Any:
    """``%etl pull --df``: the virtual file as a pandas DataFrame through Arrow (``parameters.schema`` selects
    columns); a column becomes numbers only where no text changes (``"007"`` stays a string)."""
    payload = dict(payload)
    payload.setdefault("exportType", "csv")
    payload.setdefault("exportName", f"{payload.get('virtualFileId') or 'virtual-file'}.{payload['exportType']}")

    def work(store: Any) -> Any:
        inp = parse_input(get_action("etl.pull"), payload)  # as the action reads it: a 400 naming the field
        assert isinstance(inp, PullInput)
        return frame_from(store, inp.virtual_file_id, inp.parameters.schema_, infer_types=True,
                          field="parameters.schema")

    return run_with_store("etl.pull", resources, work)


def read_frame(platform_files: PlatformFileStore, pf: Mapping[str, Any], parameters: PullParameters,
               *, nrows: int | None = None, cell_text: bool = False) -> Any:
    """A platform file exported by Pull (CSV, TSV or JSON) as a DataFrame, read with the Pull's
    ``parameters`` (its delimiter, a ``.tsv``'s tab, encoding and header row). JSON by Push's own test, and
    an NDJSON export by lines (read as one array, it failed, and its preview was always empty)."""
    import pandas as pd

    text_options: dict[str, Any] = {"dtype": str, "keep_default_na": False} if cell_text else {}
    name, content_type = str(pf.get("name", "")), str(pf.get("contentType"))
    with platform_files.open(pf) as raw:
        if is_json(name, content_type):
            lines = is_ndjson(name, content_type)
            frame = pd.read_json(io.TextIOWrapper(raw, encoding=parameters.encoding), orient="records",
                                 dtype=not cell_text, lines=lines, nrows=nrows if lines else None)
            return frame.head(nrows) if nrows else frame
        header = 0 if parameters.add_first_row_as_schema else None
        return pd.read_csv(raw, sep=csv_delimiter(parameters, name, content_type), header=header,
                           encoding=parameters.encoding, nrows=nrows, **text_options)


def _says_text_rows(name: str, content_type: str) -> bool:
    """Whether the file says it is JSON, CSV or TSV, tested as Push tests formats (Parquet first, then
    JSON, then CSV), so a preview shows the file as a Push of it would read it. A CSV must say so (by its
    type or a ``.csv``/``.tsv`` name): a ``csv_notes.txt`` or a ``text/csv-schema`` is not one, and was
    once shown as a one-column table for holding the letters ``csv``."""
    if is_parquet(name, content_type):
        return False
    return is_json(name, content_type) or is_csv(name, content_type)


def file_preview(platform_files: PlatformFileStore, parameters: PullParameters | None = None,
                 ) -> Callable[[Mapping[str, Any]], list[dict[str, Any]] | None]:
    """For display: the first rows of a small CSV/TSV/JSON file stored here (never fetched over the network),
    read with the ``parameters`` of the Pull that wrote it (a ``;`` export was once shown as one column whose
    name and cells held the semicolons); without them, as a Pull's defaults would write it."""
    read_with = parameters if parameters is not None else PullParameters()

    def preview(pf: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        name, content_type = str(pf.get("name", "")), str(pf.get("contentType", ""))
        if not _says_text_rows(name, content_type):
            return None
        if platform_files.local_id(dict(pf)) is None or not isinstance(pf.get("size"), int):
            return None
        if pf["size"] > PREVIEW_BYTES:
            return None
        try:
            frame = read_frame(platform_files, pf, read_with, nrows=OPTIONS.limit, cell_text=True)
        except Exception:  # a preview is a courtesy: a file pandas cannot read is shown without one
            return None
        return frame.to_dict(orient="records")

    return preview
