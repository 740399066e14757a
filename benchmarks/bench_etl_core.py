"""ETL core benchmark: Push / Iterate / Query / Pull against raw baselines on SQLite and PostgreSQL.

    .venv/bin/python benchmarks/bench_etl_core.py                 # 1,000,000 rows on both databases
    .venv/bin/python benchmarks/bench_etl_core.py --rows 4000000 --databases sqlite
    .venv/bin/python benchmarks/bench_etl_core.py --rows 4000000 --steps ndjson,frames   # no Iterate/Query/Pull

Baselines run in the same process on the same data and database server:
- Push: SQLite ``csv.reader`` + ``sqlite3.executemany`` in one transaction (WAL, synchronous=NORMAL), and
  the ``sqlite3`` CLI ``.import`` when installed; PostgreSQL raw ``COPY … FROM STDIN (FORMAT csv)`` of the
  file's bytes. Both raw tables have an ordered row key like ours (SQLite rowid, PostgreSQL bigserial).
- Iterate: a raw keyset scan (``WHERE rowid > ? ORDER BY rowid LIMIT 10000``) building dict rows.
- Query: the same equality SELECT on a raw table with an index on the column (20 different values).
- Regex (``rows`` step): a Query with ``$regex`` under ``$or``, against a raw keyset scan filtered by Python's
  ``re`` (``$regex`` is Python's syntax, so neither database runs it for us).
- Keys (``rows`` step, no target): a Query with ``$or`` of 4,000 composite keys (``id`` and ``city`` of
  every 250th row), against the raw table's ``(c0, c2) IN (VALUES …)`` (SQLite) or ``IN (SELECT … FROM
  unnest(…))`` (PostgreSQL), the statement shape our filter compiles to, rows built as dicts.
- Pull: raw SELECT streamed into ``csv.writer``; Pull to JSON: the same SELECT, each row's dict through
  ``json.dumps``, a page joined at a time; Pull to Parquet: the same SELECT's pages into pyarrow's
  ``ParquetWriter`` (no target of its own).
- NDJSON Push (the same rows as one object per line), the Push of a JSON array of them laid out one object
  per line (as Pull writes it), with its items side by side on one line (``json.dump``'s layout) and
  pretty-printed (``indent=2``), and ``push_frame`` of the file read by pandas (``dtype=str``) against our
  CSV Push; ``push_frame`` of the file as an analyst reads it (``read_csv`` with ``parse_dates``: integer,
  float and datetime columns) and of that frame as a stream (a ``RecordBatchReader`` of its batches; no target:
  its peak is what a stream's load holds) and the Push of that frame written as Parquet, against the CSV
  Push of that frame's ``to_csv``; ``pull_frame`` against
  ``pandas.read_sql`` of the same table. With ``--steps typed`` (not run by
  default), the same four files with ``id`` and ``amount`` as JSON numbers, against the CSV Push too (no
  target of their own). With ``--steps odd``, that NDJSON with ``amount`` written with an exponent and
  ``category`` a list in one row of a hundred, and in every row (lines rewritten by the row reader's
  conversion on the columnar path); and the strings NDJSON with one ``amount`` a number half-way (read
  again with the quoting pass), and with a key the other rows lack half-way (every key found, then read
  again). With ``--steps encodings``, the CSV and the NDJSON compressed by gzip, the CSV compressed by zstd
  and in a zip archive, the CSV in cp1252 and in UTF-16 and the NDJSON in UTF-16 (pushed with
  ``parameters.encoding``), and Pulls of the CSV to ``.gz``, ``.bz2``, ``.xz``, ``.zst`` and ``.zip`` names
  against the plain Pull of the same round; with ``--steps parameters``, the
  CSV and the NDJSON with ``onRowError: quarantine`` (no bad line), and the NDJSON with a ``schema`` and
  with ``linesToIgnore: 1``. None of these has a target of its own.
"""

from __future__ import annotations

import argparse
import csv
import functools
import itertools
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (
    COLUMNS,
    TABLE_HEADER,
    Measurement,
    measure,
    measure_alternating,
    measure_settled,
    medians,
    postgres_url,
    ratio_row,
    sample_csv,
    settled,
    warm_up,
)
from connector_ops import invoke, pull_frame, push_frame
from connector_ops.environment import resources_for
from tests.sample_rows import CITIES

BATCH = 10_000
QUERY_VALUES = CITIES[:20]


@dataclass
class Side:
    """One side of the run once its Push is done: what was measured, the read-only row steps still to
    measure (alternating with the other side's, :func:`measure_alternating`), and what to close after."""

    measured: dict[str, Measurement]
    calls: dict[str, tuple[str, Callable[[], Any]]] = field(default_factory=dict)
    close: Callable[[], Any] = lambda: None


# -- connector-ops -------------------------------------------------------------------------------
def ours(resources: dict[str, Any], csv_path: Path, steps: frozenset[str], work: Path, repeat: int) -> Side:
    pf = resources["platform_files"].add_file(csv_path).to_json()
    out: dict[str, Measurement] = {}
    warm_up(resources, csv_path, work)  # on SQLite this also starts the loader process
    store = resources["virtual_files"]
    out["push"], settling = measure_settled(
        "connector-ops push", lambda: invoke("etl.push", {"platformFile": pf}, resources), store)
    if settling is not None:  # SQLite: the push returned at commit; its WAL checkpoint followed in the loader
        out["push_settled"] = settled(out["push"], settling)
    vf = out["push"].value["virtualFileId"]
    if steps - {"rows"}:  # compared with the CSV Push: measured beside one every round
        others = {f.key: (f"connector-ops push {f.name} (same rows)",
                          {"platformFile": resources["platform_files"].add_file(f.sample(csv_path)).to_json(),
                           "parameters": f.parameters})
                  for f in OTHER_FORMATS if f.step in steps}
        out.update(medians([_push_round(resources, csv_path, (pf, others), steps, vf, round_, out["push"])
                            for round_ in range(repeat)]))
    if "rows" not in steps:
        invoke("etl.clean", {"virtualFileId": vf}, resources)
        return Side(out)

    def iterate_all() -> int:
        total, has_next = 0, True
        while has_next:
            page = invoke("etl.iterate", {"content": vf, "maxBatchSize": BATCH}, resources)
            total += len(page["content"])
            has_next = page["hasNext"]
        return total

    out["first_query"] = measure("connector-ops first query (builds the index)",
                                 lambda: invoke("etl.query", {"virtualFileId": vf, "query": {"city": "none"}},
                                                resources))
    calls = {
        "iterate": ("connector-ops iterate (10k batches)", iterate_all),
        "query": ("connector-ops query ×20", lambda: sum(
            len(invoke("etl.query", {"virtualFileId": vf, "query": {"city": c}}, resources)["result"])
            for c in QUERY_VALUES)),
        "regex": ("connector-ops query $regex or city (1 of 9 rows)", lambda: len(
            invoke("etl.query", {"virtualFileId": vf, "query": REGEX_QUERY}, resources)["result"])),
        "keys": (f"connector-ops query $or of {KEY_COUNT:,} (id, city) keys", lambda: len(invoke(
            "etl.query", {"virtualFileId": vf, "query": {"$or": [{"id": i, "city": c} for i, c in
                                                                 composite_keys(csv_path)]}}, resources)["result"])),
        "pull": ("connector-ops pull csv", lambda: invoke(
            "etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": "out.csv"}, resources)),
        "pull_json": ("connector-ops pull json", lambda: invoke(
            "etl.pull", {"virtualFileId": vf, "exportType": "json", "exportName": "out.json"}, resources)),
        "pull_parquet": ("connector-ops pull parquet", lambda: invoke(
            "etl.pull", {"virtualFileId": vf, "exportType": "parquet", "exportName": "out.parquet"}, resources)),
    }
    return Side(out, calls, lambda: invoke("etl.clean", {"virtualFileId": vf}, resources))


def _push_round(resources: dict[str, Any], csv_path: Path, sources: tuple[dict, dict[str, tuple[str, dict]]],
                steps: frozenset[str], vf: str, round_: int, first_push: Measurement) -> dict[str, Measurement]:
    """One round of the steps measured against our CSV Push: a CSV Push (the run's first one in round 0),
    the Push of the same rows in each of ``OTHER_FORMATS``, ``push_frame`` of them, and ``pull_frame``
    against ``read_sql``. ``sources``: the CSV's platform file and the other formats' (their labels and
    files), added once for every round. What a round pushed is cleaned at its end (not the first Push: the
    row steps read it)."""
    store = resources["virtual_files"]
    pf, others = sources
    measured = {"push_csv": first_push} if round_ == 0 else {"push_csv": measure_settled(
        "connector-ops push", lambda: invoke("etl.push", {"platformFile": pf}, resources), store)[0]}
    made = [] if round_ == 0 else [measured["push_csv"].value["virtualFileId"]]
    for key, (label, request) in others.items():
        measured[key], _ = measure_settled(label, lambda request=request: invoke("etl.push", request, resources),
                                           store)
        made.append(measured[key].value["virtualFileId"])
    if "frames" in steps:
        import pandas as pd
        import pyarrow as pa

        frames = [pd.read_csv(csv_path, dtype=str, keep_default_na=False)]
        measured["push_df"], _ = measure_settled("connector-ops push_frame (pandas frame in memory)",
                                                 lambda: push_frame(frames[0], resources), store)
        frames[:] = [typed_frame(csv_path)]
        measured["push_typed_df"], _ = measure_settled(
            "connector-ops push_frame (typed: int, float, datetime columns)", lambda: push_frame(frames[0], resources),
            store)
        table = pa.Table.from_pandas(frames.pop(), preserve_index=False)  # the stream's source, held before
        measured["push_stream"], _ = measure_settled(  # … so the peak is what the stream's load adds
            "connector-ops push_frame (a RecordBatchReader of the typed frame)", lambda: push_frame(
                pa.RecordBatchReader.from_batches(table.schema, iter(table.to_batches(65_536))), resources), store)
        del table
        made += [measured["push_df"].value, measured["push_typed_df"].value, measured["push_stream"].value]
        measured["pull_df"] = measure("connector-ops pull_frame (pandas)",
                                      lambda: len(pull_frame(vf, resources=resources)))
        with store.sql.reading() as conn:
            table = store.sql.info(conn, vf).table_name
        select = f'SELECT {", ".join(f"c{i}" for i in range(8))} FROM "{table}" ORDER BY seq'
        measured["read_sql"] = measure("pandas.read_sql (same table)",
                                       lambda: len(pd.read_sql(select, store.sql.engine)))
    if "encodings" in steps:
        for key, name in PULLS_PACKED.items():
            measured[key] = measure(f"connector-ops pull csv to {name}", lambda name=name: invoke(
                "etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": name}, resources))
    for made_id in made:
        invoke("etl.clean", {"virtualFileId": made_id}, resources)
    return measured


#: the Pulls to a compressed name, each against the plain Pull (``pull_plain``) of the same round
PULLS_PACKED = {"pull_plain": "out.csv", "pull_gzip": "out.csv.gz", "pull_bzip2": "out.csv.bz2",
                "pull_xz": "out.csv.xz", "pull_zstd": "out.csv.zst", "pull_zip": "out.zip"}


def sample_ndjson(csv_path: Path) -> Path:
    """The rows of ``csv_path`` as NDJSON (one object per line, every value a string), cached beside it."""
    path = csv_path.with_suffix(".ndjson")
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        with csv_path.open(newline="", encoding="utf-8") as source, tmp.open("w", encoding="utf-8") as sink:
            for row in csv.DictReader(source):
                sink.write(json.dumps(row, ensure_ascii=False) + "\n")
        tmp.replace(path)
    return path


def _encoded(source: Path, encoding: str) -> Path:
    """``source``'s text in ``encoding``, cached beside it."""
    path = source.with_name(f"{source.stem}_{encoding.replace('-', '')}{source.suffix}")
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(source.read_text(encoding="utf-8").encode(encoding))
        tmp.replace(path)
    return path


def sample_csv_again(csv_path: Path) -> Path:
    """The CSV itself (pushed with other parameters)."""
    return csv_path


def sample_cp1252_csv(csv_path: Path) -> Path:
    """The CSV in cp1252 (Windows' Western encoding; the sample's text is ASCII, so the same bytes)."""
    return _encoded(csv_path, "cp1252")


def sample_utf16_csv(csv_path: Path) -> Path:
    """The CSV in UTF-16 (with its BOM; twice the bytes)."""
    return _encoded(csv_path, "utf-16")


def sample_utf16_ndjson(csv_path: Path) -> Path:
    """:func:`sample_ndjson` in UTF-16."""
    return _encoded(sample_ndjson(csv_path), "utf-16")


def _packed(source: Path, suffix: str, write: Callable[[Path, Path], None]) -> Path:
    """``source`` compressed by ``write(source, into)``, cached beside it as its name + ``suffix``."""
    path = source.with_name(source.name + suffix)
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        write(source, tmp)
        tmp.replace(path)
    return path


def _gzipped(source: Path) -> Path:
    """``source`` compressed by gzip (its default level, as ``gzip`` the command writes), cached beside it."""
    import gzip

    def write(plain_path: Path, into: Path) -> None:
        with plain_path.open("rb") as plain, gzip.open(into, "wb") as packed:
            shutil.copyfileobj(plain, packed, 1 << 20)

    return _packed(source, ".gz", write)


def sample_zstd_csv(csv_path: Path) -> Path:
    """The CSV compressed by zstd as Pull writes it (``rows.csv.zst``: level 1, with a checksum)."""
    from connector_ops.etl.compressed import ZSTD_OPTIONS, zstd

    def write(plain_path: Path, into: Path) -> None:
        with plain_path.open("rb") as plain, zstd.open(into, "wb", options=ZSTD_OPTIONS) as packed:
            shutil.copyfileobj(plain, packed, 1 << 20)

    return _packed(csv_path, ".zst", write)


def sample_zip_csv(csv_path: Path) -> Path:
    """The CSV in a zip archive of one file, deflated at level 6, as ``zip`` the command writes (``rows.csv.zip``)."""
    import zipfile

    def write(plain_path: Path, into: Path) -> None:
        with zipfile.ZipFile(into, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
            archive.write(plain_path, plain_path.name)

    return _packed(csv_path, ".zip", write)


def sample_gzip_csv(csv_path: Path) -> Path:
    """The CSV compressed by gzip (``rows.csv.gz``)."""
    return _gzipped(csv_path)


def sample_gzip_ndjson(csv_path: Path) -> Path:
    """:func:`sample_ndjson` compressed by gzip (``rows.ndjson.gz``)."""
    return _gzipped(sample_ndjson(csv_path))


def sample_json_array(csv_path: Path) -> Path:
    """The rows of ``csv_path`` as a JSON array laid out one object per line (as Pull writes it), cached."""
    return _as_array(sample_ndjson(csv_path), csv_path.with_suffix(".json"))


def sample_compact_array(csv_path: Path) -> Path:
    """The rows of ``csv_path`` as a JSON array with its items side by side on one line (``json.dump``'s layout)."""
    return _as_array(sample_ndjson(csv_path), csv_path.with_name(csv_path.stem + "_compact.json"), compact=True)


def sample_pretty_array(csv_path: Path) -> Path:
    """The rows of ``csv_path`` as a pretty-printed JSON array (``json.dump(rows, indent=2)``'s layout)."""
    return _as_array(sample_ndjson(csv_path), csv_path.with_name(csv_path.stem + "_pretty.json"), pretty=True)


def _pretty(line: bytes) -> bytes:
    """One NDJSON object of the benchmark's rows as ``indent=2`` lays it out: its pairs split where ``, "``
    starts the next key (no value of these rows holds a quote)."""
    return b"  {\n    " + line.strip()[1:-1].replace(b', "', b',\n    "') + b"\n  }"


def _as_array(ndjson: Path, path: Path, *, compact: bool = False, pretty: bool = False) -> Path:
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        opening, separator, closing = (b"[", b", ", b"]") if compact else (b"[\n", b",\n", b"\n]\n")
        with ndjson.open("rb") as source, tmp.open("wb") as sink:
            sink.write(opening)
            for i, line in enumerate(source):
                sink.write((separator if i else b"") + (_pretty(line) if pretty else line.rstrip(b"\n")))
            sink.write(closing)
        tmp.replace(path)
    return path


NUMBERS = frozenset({"id", "amount"})


def sample_typed_ndjson(csv_path: Path) -> Path:
    """The rows of ``csv_path`` as NDJSON whose ``id`` and ``amount`` are JSON numbers, written as the CSV
    has them (``5.00``), so that they are stored as the same text: the same rows as the CSV Push, which the
    columnar path reads only once their numbers are quoted (``connector_ops.etl.json_scalars``)."""
    path = csv_path.with_name(csv_path.stem + "_typed.ndjson")
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        with csv_path.open(newline="", encoding="utf-8") as source, tmp.open("w", encoding="utf-8") as sink:
            for row in csv.DictReader(source):
                sink.write(_object_line(row, NUMBERS))
        tmp.replace(path)
    return path


def _edited(source: Path, path: Path, edit: Callable[[int, bytes], bytes]) -> Path:
    """``path`` (made once, cached): the lines of ``source``, each through ``edit(index, line)``."""
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        with source.open("rb") as lines, tmp.open("wb") as sink:
            sink.writelines(edit(i, line) for i, line in enumerate(lines))
        tmp.replace(path)
    return path


def _odd_line(line: bytes) -> bytes:
    """A typed row with ``amount`` written with an exponent (``5.25`` as ``525e-2``, stored ``5.25``) and
    ``category`` a list (``["alpha"]``): values the bytes cannot quote, so the line is rewritten as the row
    reader stores it."""
    row = json.loads(line, parse_float=str)
    whole, _, cents = row["amount"].partition(".")
    row["amount"] = f"{int(whole + cents)}e-{len(cents)}" if cents else f"{whole}e0"
    row["category"] = [row["category"]]
    return _object_line(row, {"amount"}).encode()


def _object_line(row: dict[str, Any], bare: Collection[str]) -> str:
    """``row`` as one line of JSON, the values of the keys in ``bare`` written as they are (number text)."""
    return "{" + ", ".join(f"{json.dumps(k)}: {v if k in bare else json.dumps(v, ensure_ascii=False)}"
                           for k, v in row.items()) + "}\n"


def sample_some_odd_ndjson(csv_path: Path) -> Path:
    """:func:`sample_typed_ndjson` with one row in a hundred made :func:`_odd_line`."""
    return _edited(sample_typed_ndjson(csv_path), csv_path.with_name(csv_path.stem + "_odd100.ndjson"),
                   lambda i, line: _odd_line(line) if i % 100 == 0 else line)


def sample_late_number_ndjson(csv_path: Path) -> Path:
    """The strings NDJSON (:func:`sample_ndjson`) with the ``amount`` of the row half-way written as a JSON
    number: the first block holds only strings, so the file is first read without the quoting pass."""
    half = int(csv_path.stem.rsplit("_", 1)[1]) // 2

    def edit(i: int, line: bytes) -> bytes:
        if i != half:
            return line
        amount = json.loads(line)["amount"].encode()
        return line.replace(b'"amount": "%s"' % amount, b'"amount": %s' % amount)

    return _edited(sample_ndjson(csv_path), csv_path.with_name(csv_path.stem + "_late_number.ndjson"), edit)


def sample_late_key_ndjson(csv_path: Path) -> Path:
    """The strings NDJSON (:func:`sample_ndjson`) with a key the other rows lack (``"extra"``) in the row
    half-way: the first block lacks it, so every key of the file is found before it is read again."""
    half = int(csv_path.stem.rsplit("_", 1)[1]) // 2
    return _edited(sample_ndjson(csv_path), csv_path.with_name(csv_path.stem + "_late_key.ndjson"),
                   lambda i, line: line.replace(b"}\n", b', "extra": "x"}\n') if i == half else line)


def sample_all_odd_ndjson(csv_path: Path) -> Path:
    """:func:`sample_typed_ndjson` with every row made :func:`_odd_line`."""
    return _edited(sample_typed_ndjson(csv_path), csv_path.with_name(csv_path.stem + "_odd1.ndjson"),
                   lambda _i, line: _odd_line(line))


def sample_typed_array(csv_path: Path) -> Path:
    """:func:`sample_typed_ndjson`'s rows as a JSON array laid out one object per line."""
    return _as_array(sample_typed_ndjson(csv_path), csv_path.with_name(csv_path.stem + "_typed.json"))


def sample_typed_pretty_array(csv_path: Path) -> Path:
    """:func:`sample_typed_ndjson`'s rows as a pretty-printed JSON array."""
    return _as_array(sample_typed_ndjson(csv_path), csv_path.with_name(csv_path.stem + "_typed_pretty.json"),
                     pretty=True)


def sample_typed_compact_array(csv_path: Path) -> Path:
    """:func:`sample_typed_ndjson`'s rows as a JSON array with its items side by side on one line."""
    return _as_array(sample_typed_ndjson(csv_path), csv_path.with_name(csv_path.stem + "_typed_compact.json"),
                     compact=True)


@dataclass(frozen=True)
class OtherFormat:
    """A file of the CSV's rows in another format, pushed beside the CSV Push in every round of ``step``."""

    key: str
    name: str
    sample: Callable[[Path], Path]
    step: str
    target: float | None  # against the CSV Push; None: reported, no target of its own
    parameters: dict[str, Any] = field(default_factory=dict)  # the Push's ``parameters``


def typed_frame(csv_path: Path) -> Any:
    """The sample as an analyst reads it: ``id`` integers, ``amount`` floats, ``date`` datetimes."""
    import pandas as pd

    return pd.read_csv(csv_path, parse_dates=["date"])


def _typed_frame_file(csv_path: Path, suffix: str, write: Callable[[Any, Path], None]) -> Path:
    """:func:`typed_frame` written by ``write``, cached beside the sample (named with ``suffix``)."""
    path = csv_path.with_name(csv_path.stem + "_typed_frame" + suffix)
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        write(typed_frame(csv_path), tmp)
        tmp.replace(path)
    return path


def sample_typed_frame_csv(csv_path: Path) -> Path:
    """:func:`typed_frame` written back by ``to_csv`` (the same data as a file)."""
    return _typed_frame_file(csv_path, ".csv", lambda frame, tmp: frame.to_csv(tmp, index=False))


def sample_typed_parquet(csv_path: Path) -> Path:
    """:func:`typed_frame` as a Parquet file (pyarrow's defaults: one row group up to 1Mi rows)."""
    return _typed_frame_file(csv_path, ".parquet", lambda frame, tmp: frame.to_parquet(tmp, index=False))


OTHER_FORMATS = (
    OtherFormat("push_ndjson", "NDJSON", sample_ndjson, "ndjson", 1.5),
    OtherFormat("push_array", "JSON array", sample_json_array, "ndjson", 1.5),  # held to NDJSON's target
    OtherFormat("push_compact", "JSON array on one line", sample_compact_array, "ndjson", 1.5),
    OtherFormat("push_pretty", "JSON array pretty-printed", sample_pretty_array, "ndjson", 1.5),
    OtherFormat("push_typed_ndjson", "NDJSON with numbers", sample_typed_ndjson, "typed", None),
    OtherFormat("push_typed_array", "JSON array with numbers", sample_typed_array, "typed", None),
    OtherFormat("push_typed_compact", "JSON array on one line with numbers", sample_typed_compact_array, "typed",
                None),
    OtherFormat("push_typed_pretty", "JSON array pretty-printed with numbers", sample_typed_pretty_array, "typed",
                None),
    OtherFormat("push_odd_some", "NDJSON, 1 row in 100 nested and 1e-2", sample_some_odd_ndjson, "odd", None),
    OtherFormat("push_odd_all", "NDJSON, every row nested and 1e-2", sample_all_odd_ndjson, "odd", None),
    OtherFormat("push_typed_csv", "CSV of a typed frame (to_csv)", sample_typed_frame_csv, "frames", None),
    OtherFormat("push_parquet", "Parquet of a typed frame", sample_typed_parquet, "frames", None),
    OtherFormat("push_late_number", "NDJSON of strings, a number half-way", sample_late_number_ndjson, "odd",
                None),
    OtherFormat("push_late_key", "NDJSON of strings, a new key half-way", sample_late_key_ndjson, "odd", None),
    OtherFormat("push_quarantine", "CSV, onRowError quarantine", sample_csv_again, "parameters", None,
                {"onRowError": "quarantine"}),
    OtherFormat("push_ndjson_quarantine", "NDJSON, onRowError quarantine", sample_ndjson, "parameters", None,
                {"onRowError": "quarantine"}),
    OtherFormat("push_ndjson_schema", "NDJSON with a schema of two of its keys", sample_ndjson, "parameters", None,
                {"schema": ["note", "id"]}),
    OtherFormat("push_ndjson_ignore", "NDJSON, linesToIgnore 1", sample_ndjson, "parameters", None,
                {"linesToIgnore": 1}),
    OtherFormat("push_gzip", "CSV compressed by gzip", sample_gzip_csv, "encodings", None),
    OtherFormat("push_gzip_ndjson", "NDJSON compressed by gzip", sample_gzip_ndjson, "encodings", None),
    OtherFormat("push_zstd", "CSV compressed by zstd", sample_zstd_csv, "encodings", None),
    OtherFormat("push_zip", "CSV in a zip archive", sample_zip_csv, "encodings", None),
    OtherFormat("push_cp1252", "CSV in cp1252", sample_cp1252_csv, "encodings", None, {"encoding": "cp1252"}),
    OtherFormat("push_utf16", "CSV in UTF-16", sample_utf16_csv, "encodings", None, {"encoding": "utf-16"}),
    OtherFormat("push_utf16_ndjson", "NDJSON in UTF-16", sample_utf16_ndjson, "encodings", None,
                {"encoding": "utf-16"}),
)


def write_pages(path: Path, kind: str, pages: Iterable[list[tuple]]) -> None:
    """The raw Pull baselines' writing of pages of rows: CSV by ``csv.writer``, JSON (one object per line,
    as Pull writes it) by ``json.dumps`` of each row's dict, a page joined at a time; Parquet by pyarrow's
    writer, a page's columns at a time (string columns, as Pull writes them)."""
    if kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema([(c, pa.string()) for c in COLUMNS])
        with pq.ParquetWriter(path, schema) as parquet:
            for rows in pages:
                parquet.write_table(pa.table([list(c) for c in zip(*rows, strict=True)], schema=schema))
        return
    with path.open("w", newline="", encoding="utf-8") as handle:
        if kind == "csv":
            writer = csv.writer(handle, lineterminator="\r\n")
            writer.writerow(COLUMNS)
            for rows in pages:
                writer.writerows(rows)
            return
        dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
        separator = "[\n"
        for rows in pages:
            handle.write(separator + ",\n".join(map(dumps, map(dict, map(zip, itertools.repeat(COLUMNS), rows)))))
            separator = ",\n"
        handle.write("[]\n" if separator == "[\n" else "\n]\n")


#: a $regex Query (Python's regular expressions, so no database runs it) beside an equality, under $or
REGEX_QUERY = {"$or": [{"name": {"$regex": "^name-1"}}, {"city": "City-0001"}]}


#: composite keys a Query lists (every ``KEY_STEP``-th row's ``id`` and ``city``)
KEY_STEP, KEY_COUNT = 250, 4_000


@functools.cache
def composite_keys(csv_path: Path) -> tuple[tuple[str, str], ...]:
    """``(id, city)`` of every :data:`KEY_STEP`-th row of ``csv_path``, at most :data:`KEY_COUNT` of them."""
    with csv_path.open(newline="", encoding="utf-8") as handle:
        rows = itertools.islice(csv.DictReader(handle), 0, KEY_STEP * KEY_COUNT, KEY_STEP)
        return tuple((row["id"], row["city"]) for row in rows)


def regex_scan(fetch_page: Any) -> int:
    """The raw $regex baseline: a keyset scan keeping the rows whose name ``re`` finds, or the city."""
    import re

    pattern = re.compile("^name-1")
    return keyset_scan(fetch_page, lambda r: bool(pattern.search(r[2])) or r[3] == "City-0001")


def keyset_scan(fetch_page: Any, keep: Callable[[tuple], bool] | None = None) -> int:
    """The raw Iterate baseline: pages after the last key, each materialised as dict rows. With ``keep``,
    only the rows it keeps, all held to the end as a Query's result is."""
    total, held, last = 0, [], 0
    while rows := fetch_page(last):
        batch = [dict(zip(COLUMNS, r[1:], strict=True)) for r in rows if keep is None or keep(r)]
        total += len(batch)
        if keep is not None:
            held += batch
        last = rows[-1][0]
    return total


# -- raw SQLite ----------------------------------------------------------------------------------
def raw_sqlite(db_path: Path, csv_path: Path, work: Path, steps: frozenset[str]) -> Side:
    conn = sqlite3.connect(db_path, isolation_level=None)
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "cache_size=-65536"):
        conn.execute(f"PRAGMA {pragma}")
    cols = ", ".join(f"c{i} TEXT" for i in range(8))
    marks = ", ".join("?" * 8)
    out: dict[str, Measurement] = {}

    def push() -> int:
        conn.execute(f"CREATE TABLE raw ({cols})")
        conn.execute("BEGIN")
        with csv_path.open(newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            next(reader)
            batch: list[list[str]] = []
            for row in reader:
                batch.append(row)
                if len(batch) == BATCH:
                    conn.executemany(f"INSERT INTO raw VALUES ({marks})", batch)
                    batch = []
            conn.executemany(f"INSERT INTO raw VALUES ({marks})", batch)
        conn.execute("COMMIT")
        return 0

    out["push"] = measure("raw sqlite3 executemany", push)
    if shutil.which("sqlite3"):
        cli_db = work / "cli.db"

        def cli_import() -> None:
            script = (f"PRAGMA journal_mode=WAL;\nPRAGMA synchronous=NORMAL;\nCREATE TABLE raw ({cols});\n"
                      f".import --csv --skip 1 {csv_path} raw\n")
            subprocess.run(["sqlite3", str(cli_db)], input=script, text=True, check=True, capture_output=True)

        out["push_cli"] = measure("sqlite3 CLI .import (separate process)", cli_import)
    if "rows" not in steps:
        conn.close()
        return Side(out)
    names = [f"c{i}" for i in range(8)]

    page = f"SELECT rowid, {', '.join(names)} FROM raw WHERE rowid > ? ORDER BY rowid LIMIT ?"
    conn.execute("CREATE INDEX raw_city ON raw (c2)")

    def fetch_page(last: int) -> list[tuple]:
        return conn.execute(page, (last, BATCH)).fetchall()

    def export(kind: str) -> None:
        cursor = conn.execute(f"SELECT {', '.join(names)} FROM raw ORDER BY rowid")
        write_pages(work / f"raw.{kind}", kind, iter(lambda: cursor.fetchmany(BATCH), []))

    calls = {
        "iterate": ("raw keyset scan", lambda: keyset_scan(fetch_page)),
        "query": ("raw indexed SELECT ×20", lambda: sum(
            len([dict(zip(COLUMNS, r, strict=True)) for r in
                 conn.execute(f"SELECT {', '.join(names)} FROM raw WHERE c2 = ? ORDER BY rowid", (c,))])
            for c in QUERY_VALUES)),
        "regex": ("raw keyset scan + re", lambda: regex_scan(fetch_page)),
        "keys": ("raw (c0, c2) IN (VALUES …)", lambda: len([dict(zip(COLUMNS, r, strict=True)) for r in conn.execute(
            f"SELECT {', '.join(names)} FROM raw WHERE (c0, c2) IN (VALUES "
            f"{', '.join(['(?, ?)'] * len(composite_keys(csv_path)))}) ORDER BY rowid",
            list(itertools.chain.from_iterable(composite_keys(csv_path))))])),
        "pull": ("raw SELECT + csv.writer", lambda: export("csv")),
        "pull_json": ("raw SELECT + json.dumps of each row's dict", lambda: export("json")),
        "pull_parquet": ("raw SELECT + pyarrow ParquetWriter", lambda: export("parquet")),
    }
    return Side(out, calls, conn.close)


# -- raw PostgreSQL ------------------------------------------------------------------------------
def raw_postgres(url: str, csv_path: Path, work: Path, steps: frozenset[str]) -> Side:
    import psycopg

    conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://", 1), autocommit=True)
    names = [f"c{i}" for i in range(8)]
    conn.execute("DROP TABLE IF EXISTS raw")
    conn.execute(f"CREATE TABLE raw (seq bigserial PRIMARY KEY, {', '.join(n + ' text' for n in names)})")
    out: dict[str, Measurement] = {}

    def push() -> None:
        with conn.cursor() as cur, cur.copy(
            f"COPY raw ({', '.join(names)}) FROM STDIN (FORMAT csv, HEADER true)"
        ) as copy, csv_path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                copy.write(chunk)

    out["push"] = measure("raw COPY FROM STDIN (csv bytes)", push)

    def close() -> None:
        conn.execute("DROP TABLE raw")
        conn.close()

    if "rows" not in steps:
        close()
        return Side(out)

    page = f"SELECT seq, {', '.join(names)} FROM raw WHERE seq > %s ORDER BY seq LIMIT %s"
    conn.execute("CREATE INDEX raw_city ON raw (c2)")

    def fetch_page(last: int) -> list[tuple]:
        return conn.execute(page, (last, BATCH)).fetchall()

    def query() -> int:
        total = 0
        with conn.cursor() as cur:
            for c in QUERY_VALUES:
                cur.execute(f"SELECT {', '.join(names)} FROM raw WHERE c2 = %s ORDER BY seq", (c,))
                total += len([dict(zip(COLUMNS, r, strict=True)) for r in cur.fetchall()])
        return total

    def keys() -> int:
        ids, cities = zip(*composite_keys(csv_path), strict=True)
        rows = conn.execute(f"SELECT {', '.join(names)} FROM raw WHERE (c0, c2) IN "
                            "(SELECT * FROM unnest(%s::text[], %s::text[])) ORDER BY seq",
                            (list(ids), list(cities))).fetchall()
        return len([dict(zip(COLUMNS, r, strict=True)) for r in rows])

    def export(kind: str) -> None:
        with conn.cursor("export") as cur:
            cur.itersize = BATCH
            conn.autocommit = False
            cur.execute(f"SELECT {', '.join(names)} FROM raw ORDER BY seq")
            write_pages(work / f"raw.{kind}", kind, iter(lambda: cur.fetchmany(BATCH), []))
        conn.commit()
        conn.autocommit = True

    calls = {
        "iterate": ("raw keyset scan", lambda: keyset_scan(fetch_page)),
        "query": ("raw indexed SELECT ×20", query),
        "regex": ("raw keyset scan + re", lambda: regex_scan(fetch_page)),
        "keys": ("raw (c0, c2) IN (SELECT … FROM unnest(…))", keys),
        "pull": ("raw SELECT + csv.writer", lambda: export("csv")),
        "pull_json": ("raw SELECT + json.dumps of each row's dict", lambda: export("json")),
        "pull_parquet": ("raw SELECT + pyarrow ParquetWriter", lambda: export("parquet")),
    }
    return Side(out, calls, close)


#: issue 13: Push ≤ 1.2× raw COPY on PostgreSQL, ≤ 0.7× the sqlite3 CLI; the row steps keep issue 2's targets
TARGETS = {"push": 1.2, "iterate": 1.5, "query": 1.5, "regex": 1.5, "keys": None, "pull": 1.5, "pull_json": 1.5,
           "pull_parquet": None}
LABELS = {"pull_json": "Pull JSON", "pull_parquet": "Pull Parquet", "keys": "Query $or of composite keys"}
STEPS = frozenset({"rows", "ndjson", "typed", "odd", "frames", "encodings", "parameters"})
DEFAULT_STEPS = "frames,ndjson,rows"


def report(db: str, rows: int, mine: dict[str, Measurement], raw: dict[str, Measurement]) -> list[str]:
    lines = [f"\n### {db}, {rows:,} rows × 8 columns\n", TABLE_HEADER]
    for step, target in TARGETS.items():
        if step in mine and step in raw:
            label = "Push vs executemany" if step == "push" and "push_cli" in raw else LABELS.get(step, step.title())
            lines.append(ratio_row(label, mine[step], raw[step], 2.0 if label == "Push vs executemany" else target))
    if "push_cli" in raw:
        lines.append(ratio_row("Push vs the sqlite3 CLI", mine["push"], raw["push_cli"], 0.7)
                     + " (returns at commit; CLI peak is of another process)")
        if "push_settled" in mine:
            lines.append(ratio_row("Push + its WAL checkpoint vs the sqlite3 CLI", mine["push_settled"],
                                   raw["push_cli"], 0.7))
    csv_push = mine.get("push_csv", mine["push"])  # the median of the rounds' CSV Pushes, beside those steps
    for f in OTHER_FORMATS:
        if f.key in mine:
            lines.append(ratio_row(f"Push {f.name} vs Push CSV", mine[f.key], csv_push, f.target))
    if "push_df" in mine:
        lines.append(ratio_row("push_frame vs Push CSV", mine["push_df"], csv_push, 1.2))
        lines.append(ratio_row("push_frame of a typed frame vs Push of its to_csv", mine["push_typed_df"],
                               mine["push_typed_csv"], 1.2))
        lines.append(ratio_row("push_frame of that frame as a stream (RecordBatchReader) vs Push of its to_csv",
                               mine["push_stream"], mine["push_typed_csv"], None))
        lines.append(ratio_row("Push of that frame as Parquet vs Push of its to_csv", mine["push_parquet"],
                               mine["push_typed_csv"], None))
        lines.append(ratio_row("pull_frame vs pandas.read_sql", mine["pull_df"], mine["read_sql"], 1.0))
    for key, name in PULLS_PACKED.items():
        if key in mine and key != "pull_plain":
            lines.append(ratio_row(f"Pull CSV to {name} vs Pull to out.csv", mine[key], mine["pull_plain"], None))
    if "first_query" in mine:
        lines.append(f"\nFirst query on a column (builds its index once): {mine['first_query'].seconds:.2f} s, "
                     f"peak Δ {mine['first_query'].peak_mib:.0f} MiB.")
    return lines


def both_sides(mine: Side, raw: Side, repeat: int) -> tuple[dict[str, Measurement], dict[str, Measurement]]:
    """Both sides' measurements, with their row steps measured alternating; then both closed."""
    if mine.calls:
        print("  row steps, ours and the baseline alternating:", flush=True)
    ours_rows, raw_rows = measure_alternating({step: (call, raw.calls[step]) for step, call in mine.calls.items()},
                                              repeat)
    mine.close()
    raw.close()
    return mine.measured | ours_rows, raw.measured | raw_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--steps", default=DEFAULT_STEPS,
                        help="rows (Iterate/Query/Pull), ndjson (NDJSON and JSON array Push), typed (the same "
                             "with numbers), odd (NDJSON with lines the bytes cannot quote), frames "
                             "(DataFrame push/pull), encodings (CSV and NDJSON compressed by gzip, CSV by zstd "
                             "and zipped, CSV in cp1252 and UTF-16, NDJSON in UTF-16; Pull to compressed names), "
                             "parameters (onRowError quarantine, an NDJSON schema, linesToIgnore); Push always "
                             "runs")
    parser.add_argument("--repeat", type=int, default=3,
                        help="rounds of the row steps (ours and the baseline alternating) and of the NDJSON "
                             "and DataFrame steps (each beside a CSV Push); median reported")
    args = parser.parse_args()
    steps = frozenset(args.steps.split(",")) & STEPS
    csv_path = sample_csv(args.rows)
    print(f"data: {csv_path} ({csv_path.stat().st_size / 2**20:.0f} MiB)")
    lines: list[str] = []
    for db in args.databases.split(","):
        with tempfile.TemporaryDirectory(prefix="bench-etl-") as tmp:
            work = Path(tmp)
            print(f"\n{db}:")
            if db == "sqlite":
                env = {"CONNECTOR_OPS_HOME": str(work / "home"),
                       "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{work / 'ours.db'}"}
                mine, raw = both_sides(ours(resources_for(environ=env), csv_path, steps, work, args.repeat),
                                       raw_sqlite(work / "raw.db", csv_path, work, steps), args.repeat)
            else:
                with postgres_url() as url:
                    env = {"CONNECTOR_OPS_HOME": str(work / "home"), "CONNECTOR_OPS_DATABASE_URL": url}
                    mine, raw = both_sides(ours(resources_for(environ=env), csv_path, steps, work, args.repeat),
                                           raw_postgres(url, csv_path, work, steps), args.repeat)
            lines += report(db, args.rows, mine, raw)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
