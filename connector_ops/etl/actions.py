"""The ETL actions (spec 4.C): the one implementation each entry point calls.

Each function takes its input model and the resources it names and returns its output model (or the
spec's bare value). No printing, no Dagster: the entry points own presentation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from connector_ops.etl import models as m
from connector_ops.etl.charsets import charset_suffix, with_charset
from connector_ops.etl.json_readers import NDJSON_TYPE, is_json, is_ndjson, read_json
from connector_ops.etl.ndjson_fast import push_ndjson_fast
from connector_ops.etl.pull_parquet import pull_parquet
from connector_ops.etl.push_csv import push_csv
from connector_ops.etl.push_parquet import is_parquet, push_parquet
from connector_ops.etl.quarantine import COLUMNS as QUARANTINE_COLUMNS
from connector_ops.etl.quarantine import Quarantine
from connector_ops.etl.readers import cell_text
from connector_ops.etl.row_totals import rows_to_show
from connector_ops.etl.suffixes import without
from connector_ops.etl.tsv import csv_content_type, csv_delimiter, delimiter_label, with_csv_delimiter
from connector_ops.etl.writers import csv_chunks, json_chunks, ndjson_chunks
from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.progress import reading_with_progress, reported, track
from connector_ops.models import PlatformFileOutput
from connector_ops.registry import action

if TYPE_CHECKING:  # the resources arrive built; importing them here would load SQLAlchemy and httpx for any action
    from connector_ops.etl.compressed import Packing
    from connector_ops.resources.platform_files import PlatformFileStore
    from connector_ops.resources.virtual_files.store import VirtualFileStore

ETL = ("virtual_files",)
ETL_FILES = ("virtual_files", "platform_files")


@action("etl.push", m.PushInput, m.PushOutput, resources=ETL_FILES, not_found_status=404)
def push(inp: m.PushInput, virtual_files: VirtualFileStore, platform_files: PlatformFileStore) -> m.PushOutput:
    """Load a CSV, JSON or Parquet platform file into a new virtual file.

    With ``onRowError: quarantine``, its refused lines go into a second one."""
    pf, params = inp.platform_file, inp.parameters
    if not params.use_first_row_as_schema and params.schema_ is None:
        raise InvalidInput("parameters.schema", "is required when useFirstRowAsSchema is false")
    if params.on_row_error == "fail":
        return m.PushOutput(virtual_file_id=_load(pf, params, virtual_files, platform_files, None))
    quarantine = Quarantine()
    try:
        vf_id = _load(pf, params, virtual_files, platform_files, quarantine)
        try:
            rejects = virtual_files.create_from_batches(QUARANTINE_COLUMNS, quarantine.batches())
        except BaseException:  # nothing half-written: the rows go too
            virtual_files.drop(vf_id)
            raise
    finally:
        quarantine.close()
    return m.PushOutput(virtual_file_id=vf_id, rejects_file_id=rejects)


def _load(pf: m.PushFile, params: m.PushParameters, virtual_files: VirtualFileStore,
          platform_files: PlatformFileStore, quarantine: Quarantine | None) -> str:
    if is_parquet(pf.name, pf.content_type):  # read once (copied to a temporary file first if not seekable)
        return push_parquet(virtual_files, lambda: platform_files.open(pf), pf.name, params)
    # gzip, bz2, lzma and zipfile kept out of every action's import
    from connector_ops.etl.compressed import unpacked

    # a probe, the load, a retry, an error located: one fetch; what a compressed file or a zip archive holds
    with platform_files.opener(pf) as (stored, stored_size), unpacked(stored, pf.name, stored_size) as inside:
        reopen, name, size = inside.open, inside.name, inside.size
        if is_parquet(name, ""):  # rows.parquet.gz, or a zip archive of rows.parquet
            return push_parquet(virtual_files, reopen, name, params)
        params = with_charset(params, pf.content_type)  # Pull's text/csv; charset=ISO-8859-1, say
        if not is_json(name, pf.content_type):  # a TSV (``rows.tsv.gz`` too) by a tab unless csvDelimiter says
            params = with_csv_delimiter(params, name, pf.content_type)
            return push_csv(virtual_files, reopen, pf.name, size, params, quarantine, text_size=inside.text_size)
        m.refuse_given(params, m.FOR_CSV_ONLY, "a JSON file (JSON has no field delimiter)",
                       unless_default=True)
        # also with a quarantine: what the columnar path reads whole, the row reader would refuse no line of
        vf_id, gave_up = push_ndjson_fast(virtual_files, reopen, pf.name, size, params.encoding,
                                          params.lines_to_ignore, params.schema_, text_size=inside.text_size)
        if vf_id is not None:
            return vf_id
        label = f"push {pf.name} (again, row by row)" if gave_up else f"push {pf.name}"  # as push_csv's
        with reopen() as raw, track(label, size, "B") as reporter:
            rows = read_json(reading_with_progress(raw, reporter), lines_to_ignore=params.lines_to_ignore,
                             encoding=params.encoding, reopen=reopen, quarantine=quarantine)
            return virtual_files.create_from_dicts(rows, params.schema_ or (), "platformFile")


@action("etl.pull", m.PullInput, PlatformFileOutput, resources=ETL_FILES)
def pull(inp: m.PullInput, virtual_files: VirtualFileStore, platform_files: PlatformFileStore) -> PlatformFileOutput:
    """Export a virtual file to a new platform file (CSV, JSON or Parquet), streamed.

    Compressed when the export's name ends with ``.gz``, ``.bz2``, ``.xz`` or ``.zst``; a zip archive of it
    with ``.zip``."""
    from connector_ops.etl.compressed import packing_named  # gzip, bz2, lzma and zipfile: kept out of the import

    packing = packing_named(inp.export_name, inp.export_type)
    if inp.export_type == "parquet":
        if packing is not None:
            raise InvalidInput("exportName", "a Parquet export compresses its columns itself: name it without "
                                             f"{packing.suffix}")
        return PlatformFileOutput(platform_file=pull_parquet(inp, virtual_files, platform_files))
    params = inp.parameters
    if inp.export_type == "json":
        m.refuse_given(params, m.FOR_CSV_EXPORT_ONLY,
                       "a JSON export (only CSV has a delimiter, a header row and a spreadsheet's cells)",
                       unless_default=True)
    names, pages = virtual_files.scan_tuples(inp.virtual_file_id, params.schema_, field="parameters.schema")
    total = rows_to_show(virtual_files, inp.virtual_file_id)
    with contextlib.closing(pages), track(f"pull {inp.export_name}", total, "rows") as reporter:
        # the read snapshot ends with the export, even when it fails
        return _export(inp, names, reported(pages, reporter, len), platform_files, packing)


def _export(inp: m.PullInput, names: list[str], pages: Iterator[list[tuple]], platform_files: PlatformFileStore,
            packing: Packing | None) -> PlatformFileOutput:
    params = inp.parameters
    chunks: Iterator[bytes]
    # the file server sends contentType as it is: text in another encoding than UTF-8 says which, by IANA's name
    charset = charset_suffix(params.encoding)
    data_name = without(inp.export_name, packing.suffix) if packing is not None else inp.export_name
    delimiter = None
    if inp.export_type == "csv":  # ``report.tsv`` (``.tsv.gz``, …) by tabs unless csvDelimiter says otherwise
        delimiter = csv_delimiter(params, data_name)
        chunks = csv_chunks(names, pages, delimiter=delimiter, header=params.add_first_row_as_schema,
                            encoding=params.encoding, escape_formulas=params.escape_formulas)
        media = csv_content_type(data_name, delimiter)
    else:  # named as NDJSON (events.ndjson, events.jsonl.gz): written so, for the tools that read it
        ndjson = is_ndjson(data_name, "")
        chunks = (ndjson_chunks if ndjson else json_chunks)(names, pages, encoding=params.encoding)
        media = NDJSON_TYPE if ndjson else "application/json"
    if packing is not None:
        from connector_ops.etl.compressed import compressing

        # the compression's type, keeping the parameters: ``application/gzip; charset=ISO-8859-1`` pushes
        # back from its descriptor alone (Push reads them whatever the media type)
        chunks, media = compressing(chunks, packing.compressor()), packing.content_type
    # a delimiter the type and name do not say (``report.tsv`` written with ``;``) is named, for Push to read
    content_type = media + charset + (delimiter_label(data_name, delimiter, media) if delimiter is not None else "")
    with platform_files.create(inp.export_name, content_type) as sink:
        for chunk in chunks:
            sink.write(chunk)
    assert sink.descriptor is not None
    return PlatformFileOutput(platform_file=sink.descriptor)


@action("etl.iterate", m.IterateInput, m.IterateOutput, resources=ETL, not_found_status=404,
        extra_inputs={"virtual_file_id": "content", "content": "content"})
def iterate(inp: m.IterateInput, virtual_files: VirtualFileStore) -> m.IterateOutput:
    """The next batch of at most maxBatchSize rows (or array items), and whether more remain."""
    if isinstance(inp.content, str):  # a batch of a million rows reads for seconds: shown by rows, as Query
        # no total: the rows a batch will hold are known only once read (maxBatchSize ended a last batch at 3%)
        with track(f"iterate {inp.content}", None, "rows") as reporter:
            rows, has_next = virtual_files.next_batch(inp.content, inp.max_batch_size, progress=reporter.update)
    else:
        rows, has_next = virtual_files.next_array_batch(inp.content, inp.max_batch_size)
    return m.IterateOutput.model_construct(content=rows, has_next=has_next)  # rows built by the store: no re-validation


@action("etl.query", m.QueryInput, m.QueryOutput, resources=ETL, nul_in_values=True)
def query(inp: m.QueryInput, virtual_files: VirtualFileStore) -> m.QueryOutput:
    """The rows matching a MongoDB-style filter (``{}``: all of them), in row order.

    An operand may hold a NUL where a stored value may (SQLite; the filter compiler refuses one on PostgreSQL:
    :func:`~connector_ops.resources.virtual_files.filters.compile_filter`)."""
    limit = 1 if inp.extract_only_one_result else None
    with track(f"query {inp.virtual_file_id}", None, "rows") as reporter:  # as Push and Pull show theirs
        rows = virtual_files.find(inp.virtual_file_id, inp.query, limit=limit, progress=reporter.update)
    return m.QueryOutput.model_construct(result=rows)  # rows built by the store: no re-validation


@action("etl.append_rows", m.AppendRowsInput, None, resources=ETL, nul_in_values=True)
def append_rows(inp: m.AppendRowsInput, virtual_files: VirtualFileStore) -> str:
    """Append rows to one or several virtual files in one transaction; new columns extend the schema.

    A value may hold a NUL where the database keeps one (SQLite), as a pushed file's may, so a file's own
    rows can be appended to it; PostgreSQL's text cannot, so there it is a 400 naming the value, before
    anything is written."""
    for i, row in enumerate(inp.rows):
        virtual_files.check_nul(row.content, f"rows[{i}].content")
    grouped: dict[str, list[dict[str, str | None]]] = {}
    for row in inp.rows:
        grouped.setdefault(row.virtual_file_id, []).append({k: cell_text(v) for k, v in row.content.items()})
    virtual_files.append(grouped)
    return "ok"


@action("etl.clean", m.CleanInput, None, resources=ETL, null_error_body=True)
def clean(inp: m.CleanInput, virtual_files: VirtualFileStore) -> None:
    """Remove a virtual file and free its storage."""
    virtual_files.drop(inp.virtual_file_id)
