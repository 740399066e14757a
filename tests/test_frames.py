"""DataFrames in and out through Arrow (connector_ops.push_frame / pull_frame, %etl push|pull --df): a frame
pushes exactly like the file it came from (missing stays missing, integers with gaps stay integers)."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import uuid
import zoneinfo
from collections.abc import Iterator

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from connector_ops import ConnectorError, frames, invoke, pull_frame, push_frame
from connector_ops.environment import resources_for
from connector_ops.frame_text import text_column, value_text
from connector_ops.frames import BATCH_ROWS
from connector_ops.kernel.notices import warnings_to
from connector_ops.resources.virtual_files import sqlite_loader
from tests.signals import Stop
from tests.store_activity import orphans
from tests.test_etl_push_pull import push, rows

# penguins as vega-datasets ships them (JSON, nulls for what was not measured)
PENGUINS = [
    {"Species": "Adelie", "Island": "Torgersen", "Body Mass (g)": 3750, "Sex": "MALE", "Beak Length (mm)": 39.1},
    {"Species": "Adelie", "Island": "Torgersen", "Body Mass (g)": None, "Sex": None, "Beak Length (mm)": None},
    {"Species": "Gentoo", "Island": "Biscoe", "Body Mass (g)": 5700, "Sex": "FEMALE", "Beak Length (mm)": 47.5},
]


@pytest.fixture(params=["rows", "columns"])
def load_path(request, monkeypatch):
    """SQLite loads small frames row-wise and large ones column-wise in a child process: run both."""
    if request.param == "columns":
        monkeypatch.setattr(sqlite_loader, "SQLITE_CHILD_MIN_BYTES", 0)
    return request.param


def test_pandas_frame_pushes_like_the_file(files, env, load_path):
    from_file = push(files, json.dumps(PENGUINS).encode(), "penguins.json", "application/json")
    frame = pd.read_json(io.StringIO(json.dumps(PENGUINS)))
    assert frame["Body Mass (g)"].dtype == "float64"  # integers with a gap, as pandas holds them
    vf = push_frame(frame)
    assert rows(vf) == rows(from_file)
    assert rows(vf)[0]["Body Mass (g)"] == "3750" and rows(vf)[1] == {"Species": "Adelie", "Island": "Torgersen"}
    for pushed in (vf, from_file):  # a missing value is missing, not "": the same filter finds the same row
        assert invoke("etl.query", {"virtualFileId": pushed, "query": {"Sex": None}})["result"] == [rows(vf)[1]]


@pytest.mark.parametrize("make", [
    lambda: pd.DataFrame({"a": ["x", None, "z"], "n": pd.array([1, None, 3], dtype="Int64"),
                          "f": [0.5, float("nan"), 2.25], "b": [True, False, None]}),
    lambda: pl.DataFrame({"a": ["x", None, "z"], "n": [1, None, 3], "f": [0.5, None, 2.25], "b": [True, False, None]}),
    lambda: pa.table({"a": ["x", None, "z"], "n": pa.array([1, None, 3], pa.int64()), "f": [0.5, None, 2.25],
                      "b": [True, False, None]}),
], ids=["pandas", "polars", "pyarrow"])
def test_missing_values_from_every_frame_kind(env, load_path, make):
    vf = push_frame(make())
    assert rows(vf) == [{"a": "x", "n": "1", "f": "0.5", "b": "true"}, {"b": "false"},
                        {"a": "z", "n": "3", "f": "2.25"}]


def test_pull_keeps_strings_and_missing_values_exact(files, env):
    vf = push(files, b"code,name,n\n007,Bond,1\n,Q,\n")
    frame = pull_frame(vf)
    assert list(frame.columns) == ["code", "name", "n"]
    assert frame["code"].iloc[0] == "007" and frame["n"].iloc[0] == "1"
    assert frame["code"].iloc[1] == "" and frame["n"].iloc[1] == ""  # empty fields are "", not missing
    appended = push(files, b"a\n1\n")
    invoke("etl.append_rows", {"rows": [{"virtualFileId": appended, "content": {"b": "x"}}]})
    table = pull_frame(appended, kind="pyarrow")
    assert table.to_pylist() == [{"a": "1", "b": None}, {"a": None, "b": "x"}]
    assert pull_frame(appended, kind="polars").to_dicts() == [{"a": "1", "b": None}, {"a": None, "b": "x"}]
    assert pull_frame(appended, ["b"], kind="pyarrow").column_names == ["b"]
    typed = pull_frame(vf, infer_types=True)
    assert typed["code"].tolist() == ["007", ""] and typed["name"].tolist() == ["Bond", "Q"]


def test_round_trip_frame_to_frame(env, load_path):
    frame = pd.DataFrame({"city": ["Paris", "Saint-\"Q\"", "a,b\nc"], "n": [1, 2, 3]})
    back = pull_frame(push_frame(frame), infer_types=True)
    pd.testing.assert_frame_equal(back, frame, check_dtype=False)


def test_an_integer_column_with_a_gap_pulls_exactly(env):
    """pandas' float64 would read 2**53 + 1 back as 2**53: such a column is its nullable Int64; one without a
    gap stays NumPy's int64. The frame pushes back to the same text."""
    big = str(2 ** 53 + 1)
    vf = push_frame(pd.DataFrame({"h": [big, None], "n": ["1", "2"]}))
    typed = pull_frame(vf, infer_types=True)
    assert typed.dtypes.to_dict() == {"h": pd.Int64Dtype(), "n": np.dtype("int64")}
    assert typed["h"].tolist() == [2 ** 53 + 1, pd.NA]
    assert rows(push_frame(typed)) == [{"h": big, "n": "1"}, {"n": "2"}]


def test_nineteen_digit_integers_pull_as_integers_up_to_int64s_range(env):
    """10**18 … int64's maximum (19 digits) are int64 values, as they were pushed; one past the range stays
    text (as a float it would lose digits), never wraps."""
    top, bottom = 2 ** 63 - 1, -2 ** 63
    vf = push_frame(pd.DataFrame({"a": pd.array([2 ** 62 + 1, None], dtype="Int64"),
                                  "b": [str(10 ** 18), str(top)], "c": [str(bottom), "0"],
                                  "past": [str(2 ** 63), "1"], "under": [str(bottom - 1), "1"]}))
    typed = pull_frame(vf, infer_types=True)
    assert typed[["a", "b", "c"]].dtypes.to_dict() == {"a": pd.Int64Dtype(), "b": np.dtype("int64"),
                                                       "c": np.dtype("int64")}
    assert pd.api.types.is_string_dtype(typed["past"]) and pd.api.types.is_string_dtype(typed["under"])
    assert typed["a"].tolist() == [2 ** 62 + 1, pd.NA]
    assert typed["b"].tolist() == [10 ** 18, top] and typed["c"].tolist() == [bottom, 0]
    assert typed["past"].tolist() == [str(2 ** 63), "1"] and typed["under"].tolist() == [str(bottom - 1), "1"]


def test_errors_are_the_actions_errors(env):
    with pytest.raises(ConnectorError) as info:
        push_frame("not a frame")
    assert info.value.status == 400
    assert info.value.summary() == (  # the lead says what is taken, not just pandas
        "etl.push failed (400): frame: expected a DataFrame or table (a pandas or polars DataFrame or Series, a "
        "polars LazyFrame, a pyarrow Table, RecordBatch, RecordBatchReader, Dataset or Scanner, or anything that "
        "gives an Arrow stream), got str")
    with pytest.raises(ConnectorError) as info:
        pull_frame("nope")
    assert info.value.status == 500 and "not found" in info.value.summary()
    with pytest.raises(ConnectorError) as info:
        push_frame(pd.DataFrame([[1, 2]], columns=["a", "a"]))
    assert info.value.status == 400 and "duplicate column name" in info.value.summary()


@pytest.mark.parametrize(("frame", "says"), [
    (pd.DataFrame({"id": [1, 2], "v": [3, 4]}).set_index("id", drop=False),  # was a 500: cannot insert id
     "frame.index: the index is named 'id', as a column is (the index is kept as a column): drop the index "
     "(df.reset_index(drop=True)) or rename it (df.rename_axis(…))"),
    (pa.table({"a": [1, 2]})["a"],  # was a 500: ArrowSchema describes non-struct type int64
     "frame: got a pyarrow ChunkedArray, one column, not a table: make it one (pa.table({'name': column}))"),
    (pa.array([1, 2]), "frame: got a pyarrow Int64Array, one column, not a table: make it one "
                       "(pa.table({'name': column}))"),
], ids=["index-named-as-a-column", "chunked-array", "array"])
def test_a_frame_that_is_not_one_is_a_400_naming_it(env, frame, says):
    store = resources_for(environ=env)["virtual_files"]
    before = store.inventory()
    with pytest.raises(ConnectorError) as info:
        push_frame(frame)
    assert info.value.status == 400 and info.value.summary() == f"etl.push failed (400): {says}"
    assert store.inventory() == before


@pytest.mark.parametrize("given", [{}, {"virtual_files": None}], ids=["missing", "none"])
def test_resources_without_a_store_are_invoke_s_500(env, given):
    """resources={} was a 500 quoting a KeyError; {"virtual_files": None} one quoting an AttributeError, in
    invoke() too: each is invoke's own 'resources not configured'."""
    said = "resources not configured: virtual_files"
    calls = [lambda: push_frame(pd.DataFrame({"a": [1]}), resources=given),
             lambda: pull_frame("x", resources=given),
             lambda: invoke("etl.query", {"virtualFileId": "x", "query": {}}, resources=given)]
    for call in calls:
        with pytest.raises(ConnectorError) as info:
            call()
        assert info.value.status == 500 and info.value.body == {"message": said}


@pytest.mark.parametrize("column", [["ok", "bad \ud800"], [1, "\udc00"]], ids=["strings", "mixed"])
def test_half_a_surrogate_pair_is_a_400_naming_its_column_and_index(files, env, load_path, column):
    """Python text may hold what no text file or database can (UTF-8 cannot encode it): said where, not a 500."""
    frame = pd.DataFrame({"a": ["x", "y"] * 3000, "b": pd.Series(column * 3000, dtype=object, index=range(10, 6010))},
                         index=range(10, 6010))  # object: pandas' own string type refuses such text itself
    store = resources_for(environ=env)["virtual_files"]
    before = store.inventory()
    with pytest.raises(ConnectorError) as info:
        push_frame(frame)
    assert info.value.status == 400
    assert "frame.b: the value at index 11 holds \\ud" in info.value.summary()
    assert "half of a UTF-16 surrogate pair" in info.value.summary()
    assert store.inventory() == before


def test_pulling_an_unknown_column_is_a_400_naming_it(files, env):
    """Both read paths (PostgreSQL's COPY, SQLite's pages) check the columns before reading a row."""
    vf = push(files, b"a,b\n1,2\n")
    with pytest.raises(ConnectorError) as info:
        pull_frame(vf, ["a", "zzz"])
    assert info.value.status == 400
    assert info.value.summary().startswith("etl.pull failed (400): columns: unknown column 'zzz'; the virtual file has")
    assert pull_frame(vf, ["b"], kind="pyarrow").to_pylist() == [{"b": "2"}]  # nothing else changed


def _magnitudes(dtype: type, count: int) -> np.ndarray:
    """Floats across every magnitude a column may hold (both sides of every switch to an exponent)."""
    rng = np.random.default_rng(13)
    wide = rng.standard_normal(count) * 10.0 ** rng.integers(-30, 30, count)
    money = np.round(rng.standard_normal(count) * 1000, 2)
    edges = np.array([1.0, -0.0, 0.5, 1e-4, 9.99e-5, 1e-5, 1e15, 1e16, 123456789012.0, 2.0**53, 1 / 3, np.inf, -np.inf])
    with np.errstate(over="ignore"):  # a half float holds up to 65504: the rest is infinite, as it would be
        return np.concatenate([wide, money, edges]).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_floats_become_the_text_python_prints(dtype):
    """What to_csv and json.dumps write: Arrow's cast prints the same digits in another form (1, 1.5e-7)."""
    values = _magnitudes(dtype, 50_000 if dtype is not np.float16 else 500)
    text = text_column(pa.array(values)).to_pylist()
    assert text == [str(v) for v in values]  # numpy's str of a float is Python's repr, at the float's own width
    if dtype is np.float64:
        assert text == [repr(float(v)) for v in values]
    assert text == pd.read_csv(io.StringIO(pd.DataFrame({"x": values}).to_csv(index=False)), dtype=str)["x"].tolist()


def test_a_frame_pushes_like_the_file_written_from_it(files, env, load_path):
    """Floats, a Series, columns of two levels: the rows are those of the same frame written to a file (CSV by
    to_csv where nothing is missing; JSON where something is). Bytes: the text they hold."""
    frame = pd.DataFrame({"price": [1.0, 2.5, 1e-7], "big": [1e15, 123456789012.5, -0.0],
                          "when": pd.to_datetime(["2024-01-01", "2024-02-03", "2024-03-04 05:06:07"],
                                                 format="ISO8601")})
    csv = frame.to_csv(index=False).encode()
    assert rows(push_frame(frame)) == rows(push(files, csv))
    assert rows(push_frame(frame))[0] == {"price": "1.0", "big": "1000000000000000.0", "when": "2024-01-01 00:00:00"}
    raw = pd.DataFrame({"raw": [b"caf\xc3\xa9", b"", b"x,y"]})  # to_csv would write b'caf\xc3\xa9': we decode
    assert rows(push_frame(raw)) == rows(push(files, "raw\ncafé\n\"\"\n\"x,y\"\n".encode()))
    gaps = pd.DataFrame({"x": [0.25, None, 0.0015], "n": [1.0, 2.0, None]})  # n: integers with a gap, in pandas
    as_json = b'[{"x": 0.25, "n": 1}, {"x": null, "n": 2}, {"x": 0.0015, "n": null}]'
    assert rows(push_frame(gaps)) == rows(push(files, as_json, "gaps.json", "application/json"))
    assert rows(push_frame(gaps)) == [{"x": "0.25", "n": "1"}, {"n": "2"}, {"x": "0.0015"}]
    series = pd.Series([1.5, None], name="s")
    assert rows(push_frame(series)) == rows(push_frame(series.to_frame())) == [{"s": "1.5"}, {}]
    assert rows(push_frame(pl.Series("s", [1.5, None]))) == [{"s": "1.5"}, {}]
    levels = pd.DataFrame([[1, 2]], columns=pd.MultiIndex.from_tuples([("x", "a"), ("x", "b")]))
    assert rows(push_frame(levels)) == [{"('x', 'a')": "1", "('x', 'b')": "2"}]  # as pyarrow and polars name them
    assert pl.from_pandas(levels).columns == ["('x', 'a')", "('x', 'b')"]


_PRICES = pd.DataFrame({"close": [101.5, 99.0]}, index=pd.to_datetime(["2024-01-02", "2024-01-03"]))


@pytest.mark.parametrize(("frame", "labels"), [
    (_PRICES, "index"),  # a time series: the dates were dropped
    (pd.DataFrame({"sales": [3, 4]}, index=["Paris", "Lyon"]), "index"),
    (pd.DataFrame({"a": [1], "b": [2]}).T, "index"),  # a transposed frame: the former column names
    (pd.DataFrame({"v": [1, 2]}, index=[0.5, 1.0]), "index"),
    (pd.DataFrame({"v": [1, 2]}, index=pd.CategoricalIndex(["x", "y"])), "index"),
    (pd.DataFrame({"v": [1, 2]}, index=pd.MultiIndex.from_tuples([("x", 1), ("y", 2)])), ["level_0", "level_1"]),
    (_PRICES.rename_axis("day"), "day"),  # named: kept, as before
    (pd.DataFrame({"v": [1, 2]}, index=pd.Index([7, 8], name="id")), "id"),
], ids=["datetime", "strings", "transposed", "floats", "categorical", "levels", "named", "named-integers"])
def test_an_index_pushes_as_to_csv_writes_it(files, env, frame, labels):
    """An index is a column of the file to_csv writes, named as reset_index() names it where it has no name."""
    pushed = rows(push_frame(frame))
    assert pushed == rows(push(files, frame.to_csv(index_label=labels).encode()))
    assert list(pushed[0])[:len(labels) if isinstance(labels, list) else 1] == \
        (labels if isinstance(labels, list) else [labels])
    series = frame.iloc[:, 0]  # a Series keeps its index too
    assert rows(push_frame(series)) == rows(push(files, series.to_csv(index_label=labels).encode()))
    if frame is _PRICES:
        assert pushed == [{"index": "2024-01-02", "close": "101.5"}, {"index": "2024-01-03", "close": "99.0"}]


def test_row_numbers_are_no_column(env):
    """An unnamed integer index is row numbers by pandas' convention: the default one, or what a filter leaves."""
    frame = pd.DataFrame({"x": [1, 2, 3], "y": ["a", "b", "c"]})
    for rows_only in (frame, frame[frame.x > 1], frame.set_index(pd.Index([10, 20, 30], dtype="Int64"))):
        assert list(rows(push_frame(rows_only))[0]) == ["x", "y"]


def test_an_unnamed_index_named_as_a_column_is_a_400_naming_the_index(env):
    store = resources_for(environ=env)["virtual_files"]
    before = store.inventory()
    frame = pd.DataFrame({"index": [1, 2]}, index=["a", "b"])  # reset_index() would call it level_0
    with pytest.raises(ConnectorError) as info:
        push_frame(frame)
    assert info.value.status == 400 and info.value.summary() == (
        "etl.push failed (400): frame.index: the index, unnamed, would become the column 'index', but a column "
        "has that name already: name the index (df.rename_axis(…)) or drop it (df.reset_index(drop=True))")
    assert store.inventory() == before
    assert rows(push_frame(frame.rename_axis("key"))) == [{"key": "a", "index": "1"}, {"key": "b", "index": "2"}]


def _times(*texts: str, tz: str | None = None) -> pd.Series:
    times = pd.Series(pd.to_datetime(list(texts), format="ISO8601"))
    return times.dt.tz_localize(tz) if tz else times


@pytest.mark.parametrize("times", [
    _times("2024-01-01", None, "1969-12-31"),
    _times("2024-01-01", "2024-01-02 03:04:05", None),
    _times("2024-01-01 00:00:00.5", None, "1960-01-01 23:59:59.25"),
    _times("2024-01-01 00:00:00.000001", "2024-01-02"),
    _times("2024-01-01 00:00:00.000000001", "2024-01-02"),
    _times("2024-01-01", "2024-07-01 03:04:05", None, tz="Europe/Paris"),
    _times("2024-01-01", None, tz="UTC"),
], ids=["dates", "seconds", "milliseconds", "microseconds", "nanoseconds", "paris", "utc"])
def test_times_push_as_to_csv_writes_them(files, env, times):
    """The form is the whole column's, as to_csv picks it, also when only the last slice needs the seconds.
    (The text is made before either load path runs: one is enough here.)"""
    frame = pd.DataFrame({"t": times.iloc[[0] * (BATCH_ROWS + 5) + list(range(len(times)))].reset_index(drop=True)})
    from_file = pull_frame(push(files, frame.to_csv(index=False).encode()), kind="pyarrow")["t"].to_pylist()
    pushed = pull_frame(push_frame(frame), kind="pyarrow")["t"].to_pylist()
    assert pushed == [t or None for t in from_file]  # to_csv writes NaT as ""
    assert pull_frame(push_frame(pl.from_pandas(frame)), kind="pyarrow")["t"].to_pylist() == pushed


@pytest.mark.parametrize("times", [
    _times("2024-01-01", None, "1969-12-31"),
    _times("2024-01-01", "2024-01-02 03:04:05.5", None),
    _times("2024-01-01", "2024-07-01", None, tz="Europe/Paris"),
], ids=["dates", "milliseconds", "paris"])
def test_a_categorical_of_times_pushes_as_to_csv_writes_it(files, env, times):
    """A Categorical of dates was '2024-01-01 00:00:00' (no form for the whole column: a categorical's dtype
    is no datetime's); its form is now the values', as to_csv writes it, also when only the last slice
    needs the seconds. A category no row holds does not count, as in to_csv."""
    values = times.iloc[[0] * (BATCH_ROWS + 5) + list(range(len(times)))].reset_index(drop=True)
    unused = pd.DatetimeIndex([pd.Timestamp("2030-01-01 05:06:07")]).tz_localize(times.dt.tz)
    categories = pd.DatetimeIndex(times.dropna().unique()).append(unused)
    frame = pd.DataFrame({"t": pd.Categorical(values, categories=categories)})
    from_file = pull_frame(push(files, frame.to_csv(index=False).encode()), kind="pyarrow")["t"].to_pylist()
    pushed = pull_frame(push_frame(frame), kind="pyarrow")["t"].to_pylist()
    assert pushed == [t or None for t in from_file]
    assert pushed == pull_frame(push_frame(pd.DataFrame({"t": values})), kind="pyarrow")["t"].to_pylist()
    table = pa.table({"t": pa.array(values).dictionary_encode()})  # a dictionary of timestamps: was a 500
    assert pull_frame(push_frame(table), kind="pyarrow")["t"].to_pylist() == pushed


def test_a_categorical_of_floats_pushes_as_the_floats(env):
    """Whole numbers only: integers, as in a float column (and a pyarrow dictionary); else as Python prints them."""
    for floats in ([1.0, None, 3750.0], [1.0, None, 2.5]):
        values = pd.Series(floats * (BATCH_ROWS // 2))
        pushed = rows(push_frame(pd.DataFrame({"f": pd.Categorical(values)})))
        assert pushed == rows(push_frame(pd.DataFrame({"f": values})))
        assert pushed == rows(push_frame(pa.table({"f": pa.array(values).dictionary_encode()})))
        whole = floats[2] % 1 == 0
        assert pushed[:3] == ([{"f": "1"}, {}, {"f": "3750"}] if whole else [{"f": "1.0"}, {}, {"f": "2.5"}])


_PARIS = zoneinfo.ZoneInfo("Europe/Paris")


def _at(hours: int) -> dt.timezone:
    return dt.timezone(dt.timedelta(hours=hours))


@pytest.mark.parametrize("values", [
    # an API's ISO text parsed value by value: Paris in winter and summer, São Paulo (was all +01:00)
    [dt.datetime.fromisoformat(t) for t in ("2024-03-30T09:00:00+01:00", "2024-04-02T09:00:00+02:00",
                                            "2024-04-02T09:00:00-03:00")],
    [dt.datetime(2024, 1, 1, 9, tzinfo=dt.UTC), None, dt.datetime(2024, 1, 1, 9)],  # the naive one was +00:00
    [dt.datetime(2024, 1, 1, 9), dt.datetime(2024, 1, 1, 9, tzinfo=_at(2))],  # the aware one lost its offset
    [dt.datetime(2024, 1, 1, 5, tzinfo=_PARIS), pd.NaT, dt.datetime(2024, 7, 1, 5, 0, 0, 500000, tzinfo=dt.UTC)],
    [pd.Timestamp("2024-03-30 09:00:00.5+01:00"), pd.Timestamp("2024-04-02 09:00:00.000000001+02:00")],
    [pd.Timestamp("2024-03-30 09:00:00.000000001+01:00"), pd.Timestamp("2024-04-02 09:00:00+01:00")],  # one zone
    [dt.date(2024, 1, 1), dt.datetime(2024, 7, 1, 5, tzinfo=dt.UTC)],  # the datetime was cut to its day
], ids=["offsets", "aware-naive", "naive-aware", "zones", "timestamps", "nanoseconds", "date-datetime"])
def test_datetimes_of_several_zones_push_as_to_csv_writes_them(files, env, values):
    """An object column of datetimes with different offsets, or naive and aware ones, or dates and
    datetimes: Arrow gave the column the first value's type, moving every value into its offset (and
    dropped a Timestamp's nanoseconds). Each is now stored as to_csv writes it, its own offset kept; so is a
    column whose first slice has a single zone."""
    for column in (pd.Series(values, dtype=object),
                   pd.Series([values[0]] * BATCH_ROWS + values, dtype=object)):  # only the last slice is mixed
        frame = pd.DataFrame({"t": column})
        expected = pull_frame(push(files, frame.to_csv(index=False).encode()), kind="pyarrow")["t"].to_pylist()
        assert pull_frame(push_frame(frame), kind="pyarrow")["t"].to_pylist() == [t or None for t in expected]
    assert [t or None for t in expected[-len(values):]] == [None if pd.isna(v) else str(v) for v in values]


def test_datetimes_of_one_zone_keep_arrow_s_typed_path(files, env):
    """One time zone (a ``ZoneInfo`` across winter and summer, one fixed offset) is no reason to print values
    one at a time: Arrow keeps it and prints each value in its own offset, as to_csv writes it."""
    for values in ([dt.datetime(2024, 1, 1, 5, tzinfo=_PARIS), None, dt.datetime(2024, 7, 1, 5, tzinfo=_PARIS)],
                   [dt.datetime(2024, 1, 1, 5, tzinfo=_at(1)), dt.datetime(2024, 7, 1, 5, tzinfo=_at(1))],
                   [dt.datetime(2024, 1, 1, 5), dt.datetime(2024, 7, 1, 5, 0, 0, 500)]):
        frame = pd.DataFrame({"t": pd.Series(values, dtype=object)})
        assert frames._pandas_only_as_text(frame) is frame
        expected = pull_frame(push(files, frame.to_csv(index=False).encode()), kind="pyarrow")["t"].to_pylist()
        assert pull_frame(push_frame(frame), kind="pyarrow")["t"].to_pylist() == [t or None for t in expected]


@pytest.mark.parametrize("column", [
    pd.Series(pd.period_range("2024-01", periods=3, freq="M")),  # was the periods' ordinals: 648, 649, 650
    pd.Series(pd.interval_range(0, 3)),
    pd.Series([1 + 2j, 3j, 0.5]),  # was a 500: Arrow has no complex numbers
    pd.Series(pd.to_timedelta(["1 day", "2h", "1.5s"])),  # was Python's "1 day, 0:00:00"; now pandas' own
    pd.Series(pd.arrays.SparseArray([0, 0, 1.5])),  # was a 500
    pd.Series([decimal.Decimal("1.10"), decimal.Decimal("2"), decimal.Decimal("-0.001")]),  # was 2.000, padded
], ids=["period", "interval", "complex", "timedelta", "sparse", "decimal"])
def test_pandas_own_types_push_as_to_csv_writes_them(files, env, column):
    """…or, for timedeltas, as pandas prints each value (to_csv picks one form for the column)."""
    for values in (column, column.reindex(range(len(column) + 1))):  # the second with a missing value
        frame = pd.DataFrame({"v": values})
        if values.dtype.kind == "m":
            expected = [None if pd.isna(v) else str(v) for v in values]
        else:  # to_csv writes a missing value as ""
            expected = [v or None for v in pull_frame(push(files, frame.to_csv(index=False).encode()),
                                                      kind="pyarrow")["v"].to_pylist()]
        assert pull_frame(push_frame(frame), kind="pyarrow")["v"].to_pylist() == expected
        assert expected[-1] is None or values is column


@pytest.mark.parametrize("make", [
    lambda: pd.DataFrame({"a": [b"ok", b"\xff"]}, index=[5, 6]),
    lambda: pd.DataFrame({"a": [b"ok", "text", b"\xff"]}, index=[4, 5, 6]),  # mixed: each value on its own
    lambda: pa.table({"a": pa.array([b"ok", None, b"\xfe"], pa.binary())}),
], ids=["bytes", "mixed", "pyarrow"])
def test_bytes_that_are_not_utf8_are_a_400_naming_their_column_and_index(env, load_path, make):
    store = resources_for(environ=env)["virtual_files"]
    before = store.inventory()
    with pytest.raises(ConnectorError) as info:
        push_frame(make())
    assert info.value.status == 400
    where = 2 if isinstance(make(), pa.Table) else 6  # a frame's index; a table's row
    assert f"frame.a: the value at index {where} is bytes that are not UTF-8 text" in info.value.summary()
    assert store.inventory() == before


def test_pull_turns_into_numbers_only_what_comes_back_the_same(files, env):
    """A float frame comes back as floats; "nan" (a missing value as a float) and "-0" (0 as an integer) stay text."""
    floats = _magnitudes(np.float64, 2000)
    frame = pd.DataFrame({"x": floats[np.isfinite(floats)], "n": 7})
    back = pull_frame(push_frame(frame), infer_types=True)
    pd.testing.assert_frame_equal(back, frame)
    vf = push(files, b"a,b,c\nnan,-0,1.5e-7\n1.5,1,2\n")
    typed = pull_frame(vf, infer_types=True)
    assert typed["a"].tolist() == ["nan", "1.5"] and typed["b"].tolist() == ["-0", "1"]
    assert typed["c"].tolist() == ["1.5e-7", "2"]  # Push would store 1.5e-07: the text is kept


class _ArrowStream:
    """Anything that gives an Arrow stream through the PyCapsule interface, as a DuckDB relation does."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def __arrow_c_stream__(self, requested_schema=None):
        return self.table.__arrow_c_stream__(requested_schema)


def _stamped(rows_: int) -> pa.Table:
    return pa.table({"n": pa.array(range(rows_)), "x": pa.array([i / 4 for i in range(rows_)]),
                     "t": pa.array([1_700_000_000 + 3601 * i for i in range(rows_)], pa.timestamp("s")),
                     "s": pa.array([None if i % 7 == 0 else f"r{i}" for i in range(rows_)])})


@pytest.mark.parametrize("make", [
    lambda table: pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=1000)),
    lambda table: pl.from_arrow(table).lazy().filter(pl.col("n") >= 0),
    _ArrowStream,
], ids=["reader", "lazyframe", "c-stream"])
def test_a_stream_pushes_like_the_table_it_streams(env, load_path, make):
    """A LazyFrame too: through collect_batches from polars 1.34, collected whole before (it was refused there,
    by a message saying a LazyFrame works); run under a polars below 1.34, this covers that branch."""
    table = _stamped(5000)
    assert rows(push_frame(make(table))) == rows(push_frame(table))


def test_a_dataset_or_its_scanner_pushes_as_its_reader_does(env, tmp_path):
    """A pyarrow Dataset or Scanner was refused ('expected a pandas DataFrame, got Scanner'), though its
    reader was taken: both are read through it, a batch at a time."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    table = _stamped(3000)
    for i, start in enumerate(range(0, 3000, 1000)):  # three files, read a batch of 100 rows at a time
        pq.write_table(table.slice(start, 1000), tmp_path / f"part-{i}.parquet")
    dataset = ds.dataset(tmp_path, format="parquet")
    expected = rows(push_frame(dataset.scanner(batch_size=100).to_reader()))
    assert len(expected) == 3000
    assert rows(push_frame(dataset)) == rows(push_frame(dataset.scanner(batch_size=100))) == expected
    late = dataset.scanner(columns=["n", "s"], filter=pc.field("n") >= 1500)
    assert rows(push_frame(late)) == [{k: row[k] for k in ("n", "s") if k in row} for row in expected[1500:]]
    assert rows(push_frame(ds.dataset(pa.table({"a": [1, 2]})))) == [{"a": "1"}, {"a": "2"}]  # in memory


def test_a_stream_is_read_ahead_only_as_far_as_deciding_how_to_load_it():
    """What is held before the first row is written: the first 16 MiB, not the stream."""
    from connector_ops.frame_streams import peeked

    handed = []

    def batches():
        for i in range(100):
            handed.append(i)
            yield pa.record_batch({"v": pa.array(["x" * 1024] * 1024)})  # just over 1 MiB each

    size, stream = peeked(batches())
    assert len(handed) == 16 and size >= 16 << 20
    assert sum(b.num_rows for b in stream) == 102_400 and len(handed) == 100
    assert peeked(iter([pa.record_batch({"v": ["a"]})]))[0] < 100  # a short stream: its own size


def test_a_stream_that_fails_half_way_leaves_nothing(env, load_path):
    store = resources_for(environ=env)["virtual_files"]
    before = store.inventory()
    table = _stamped(3000)

    def batches():
        yield from table.to_batches(max_chunksize=1000)[:2]
        raise OSError("the source went away")

    with pytest.raises(ConnectorError) as info:
        push_frame(pa.RecordBatchReader.from_batches(table.schema, batches()))
    assert "the source went away" in info.value.summary()
    assert store.inventory() == before


@pytest.mark.parametrize("tz", [None, "Europe/Paris"])
def test_a_streams_times_are_each_as_python_prints_it(env, tz):
    """A stream's later batches cannot be seen first, so no form for the whole column: each value its own."""
    values = [dt.datetime(2024, 1, 1), dt.datetime(2024, 7, 1, 3, 4, 5, 500_000), None, dt.datetime(1969, 12, 31)]
    times = pa.array(values, pa.timestamp("us"))
    if tz:
        times = pc.assume_timezone(times, tz)
    table = pa.table({"t": times})
    pushed = pull_frame(push_frame(pa.RecordBatchReader.from_batches(table.schema, table.to_batches())),
                        kind="pyarrow")["t"].to_pylist()
    assert pushed == [None if v is None else str(v) for v in times.to_pylist()]
    assert pushed[1] == ("2024-07-01 03:04:05.500000+02:00" if tz else "2024-07-01 03:04:05.500000")


def test_a_stream_read_before_pushes_an_empty_file_and_says_so(env):
    """A reader gives its rows once; pushed again it gives none, which nothing can tell from an empty stream:
    the user is told (the notice goes where the entry point sends warnings; here a list)."""
    table = pa.table({"a": ["1", "2"]})
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches())
    told: list[str] = []
    with warnings_to(told.append):
        first = push_frame(reader)
        assert told == []  # rows: nothing to say
        again = push_frame(reader)
    assert pull_frame(first)["a"].tolist() == ["1", "2"]
    assert pull_frame(again).columns.tolist() == ["a"] and len(pull_frame(again)) == 0
    assert told == ["frame: the stream gave no rows, so the virtual file is empty (a RecordBatchReader or other "
                    "Arrow stream can be read only once: was it read before?)"]


@pytest.mark.parametrize(("arguments", "says"), [
    ({"columns": "a"}, "columns: expected a list of column names, got 'a'"),  # not the columns 'a', 'b', …
    ({"columns": 5}, "columns: expected a list of column names, got 5"),
    ({"columns": ["a", 1]}, "columns: expected a list of column names, got ['a', 1]"),
    ({"kind": "numpy"}, "kind: expected 'pandas', 'polars' or 'pyarrow', got 'numpy'"),  # not pandas by default
    ({"virtual_file_id": None}, "virtualFileId: expected a virtual file id (a string), got NoneType"),
])
def test_a_python_callers_mistake_is_a_400_naming_the_argument(files, env, arguments, says):
    vf = push(files, b"a,b\n1,2\n")
    with pytest.raises(ConnectorError) as info:
        pull_frame(**({"virtual_file_id": vf} | arguments))
    assert info.value.status == 400 and info.value.summary() == f"etl.pull failed (400): {says}"
    assert pull_frame(vf, (c for c in ["b"]), kind="pyarrow").to_pylist() == [{"b": "2"}]  # any iterable of names


def test_polars_types_arrow_lacks_or_prints_its_own_way(env):
    """An Int128 (no Arrow type) as its digits, was a 500; a duration as pandas prints it, as from pandas."""
    wide = pl.DataFrame({"a": [2**100, None]}, schema={"a": pl.Int128})
    assert rows(push_frame(wide)) == [{"a": str(2**100)}, {}]
    spans = pl.DataFrame({"d": [dt.timedelta(hours=2), None, dt.timedelta(days=1, microseconds=5)]})
    assert rows(push_frame(spans)) == rows(push_frame(spans.to_pandas())) == [
        {"d": "0 days 02:00:00"}, {}, {"d": "1 days 00:00:00.000005"}]


def test_polars_object_values_push_as_pandas_gives_them(env, load_path):
    """A polars Object column was stored as the memory address of each value (polars exports it as 8-byte
    pointers), or refused as bytes that are not UTF-8: each value is now its text, as from a pandas object
    column of the same values; in a LazyFrame too."""
    values = [object(), {"k": 1}, decimal.Decimal("1.10"), None, [1, "a"], dt.date(2024, 1, 2), "text", b"caf\xc3\xa9"]
    frame = pl.DataFrame({"v": values, "n": range(len(values))}, schema={"v": pl.Object, "n": pl.Int64})
    expected = rows(push_frame(pd.DataFrame({"v": pd.Series(values, dtype=object), "n": range(len(values))})))
    assert rows(push_frame(frame)) == expected
    assert [row.get("v") for row in expected] == [str(values[0]), '{"k":1}', "1.10", None, '[1,"a"]', "2024-01-02",
                                                  "text", "café"]
    lazy = frame.lazy().with_columns(w=pl.col("n").cast(pl.Int128) * 2**80)  # an Int128 too: was a 500 here
    assert rows(push_frame(lazy)) == [row | {"w": str(i * 2**80)} for i, row in enumerate(expected)]


def test_polars_object_bytes_that_are_not_utf8_are_a_400_naming_their_row(env):
    frame = pl.DataFrame({"v": [b"ok", "x", b"\xff"]}, schema={"v": pl.Object})
    for pushed in (frame, frame.lazy()):
        with pytest.raises(ConnectorError) as info:
            push_frame(pushed)
        assert info.value.summary() == ("etl.push failed (400): frame.v: the value at index 2 is bytes that are not "
                                        "UTF-8 text; decode them to text first")


def test_a_stream_stopped_half_way_leaves_nothing_and_the_next_push_works(env, signalled_after):
    """A Ctrl-C while a long stream is loaded (here the test's own signal): the load is rolled back (on SQLite
    in the loader process, where a stream this long goes), and the store takes the next push."""
    store = resources_for(environ=env)["virtual_files"]
    url = env["CONNECTOR_OPS_DATABASE_URL"]
    before = store.inventory()
    schema = pa.schema([("a", pa.string()), ("b", pa.string())])

    def batches(count: int) -> Iterator[pa.RecordBatch]:
        for i in range(count):
            yield pa.record_batch({"a": [f"r{i}-{j}" for j in range(20_000)], "b": ["x" * 20] * 20_000}, schema)

    signalled_after(1.5)
    with pytest.raises(Stop):
        push_frame(pa.RecordBatchReader.from_batches(schema, batches(10_000)))  # minutes, uninterrupted
    assert store.inventory() == before and orphans(url) == set()
    again = push_frame(pa.RecordBatchReader.from_batches(schema, batches(40)))
    assert pull_frame(again, ["a"], kind="pyarrow").num_rows == 800_000


def test_a_year_of_five_digits_keeps_its_date(env):
    """numpy's seconds reach the year 294,247, and Arrow prints such a year whole: the text is cut from its end."""
    seconds = pa.array([253_402_300_799 + 86_400 * 366, 3 * 86_400], pa.timestamp("s"))  # 10000-12-31 23:59:59
    assert rows(push_frame(pa.table({"t": seconds}))) == [{"t": "10000-12-31 23:59:59"}, {"t": "1970-01-04 00:00:00"}]
    days = pa.array([86_400 * 3_652_425, 0], pa.timestamp("s"))  # at midnight: dates only
    assert rows(push_frame(pa.table({"d": days}))) == [{"d": "11970-01-01"}, {"d": "1970-01-01"}]
    stream = pa.RecordBatchReader.from_batches(pa.schema([("t", seconds.type)]), [pa.record_batch([seconds], ["t"])])
    assert rows(push_frame(stream))[0] == {"t": "10000-12-31 23:59:59"}


_NESTED = [{"t": dt.datetime(2024, 1, 2, 5, 6, 7), "d": dt.date(2024, 1, 2), "s": dt.timedelta(hours=2),
            "b": b"caf\xc3\xa9"}, None]


@pytest.mark.parametrize("make", [
    lambda: pd.DataFrame({"v": _NESTED}),
    lambda: pl.DataFrame({"v": _NESTED}),
    lambda: pl.DataFrame({"v": _NESTED}, schema={"v": pl.Object}),
    lambda: pa.table({"v": pa.array(_NESTED)}),
    lambda: pa.RecordBatchReader.from_batches(pa.table({"v": pa.array(_NESTED)}).schema,
                                              pa.table({"v": pa.array(_NESTED)}).to_batches()),
], ids=["pandas", "polars", "polars-object", "pyarrow", "stream"])
def test_dates_durations_and_bytes_inside_a_struct_push_as_json(env, make):
    """A record from an API, its dates parsed: was a 500 (TypeError: datetime is not a JSON value). Each value
    inside is the JSON text it would have as a column of its own."""
    assert rows(push_frame(make())) == [
        {"v": '{"t":"2024-01-02 05:06:07","d":"2024-01-02","s":"0 days 02:00:00","b":"café"}'}, {}]
    mixed = pd.DataFrame({"v": [dt.timedelta(hours=2), "x"]})  # was Python's "2:00:00", unlike a column of them
    assert rows(push_frame(mixed)) == [{"v": "0 days 02:00:00"}, {"v": "x"}]


@pytest.mark.parametrize("make", [
    lambda: pd.DataFrame({"v": [[b"ok"], [b"\xff"]]}, index=[5, 1]),
    lambda: pl.DataFrame({"v": [[b"ok"], [b"\xff"]]}),
    lambda: pl.DataFrame({"v": [{"b": b"ok"}, {"b": b"\xff"}]}, schema={"v": pl.Object}),
], ids=["pandas", "polars", "polars-object"])
def test_bytes_inside_a_list_that_are_not_utf8_are_a_400_naming_the_row(env, make):
    with pytest.raises(ConnectorError) as info:
        push_frame(make())
    assert info.value.status == 400 and info.value.summary() == (
        "etl.push failed (400): frame.v: the value at index 1 is bytes that are not UTF-8 text; decode them to "
        "text first")


@pytest.mark.parametrize("mixed", [
    [1, "x", None],  # zip codes from a spreadsheet: some numbers, some text
    [2**64, 1, None],  # a Python int past 64 bits: was a 500 (OverflowError)
    [{"id": uuid.UUID(int=1)}, {"id": uuid.UUID(int=2)}, None],  # was a 500 (ArrowNotImplementedError)
], ids=["ints-and-strings", "past-64-bits", "uuid-in-dict"])
def test_a_column_arrow_cannot_type_changes_no_other_column(env, load_path, mixed):
    """One such column made every column text value by value: integers with gaps became '3750.0', dates
    '2024-01-01 00:00:00'. Only that column is now; the others are stored as without it."""
    others = pd.DataFrame({"n": [3750.0, None, 2.0], "t": pd.to_datetime(["2024-01-01", "2024-01-02", None]),
                           "b": [True, None, False]})
    expected = rows(push_frame(others))
    assert expected[0] == {"n": "3750", "t": "2024-01-01", "b": "true"}
    pushed = rows(push_frame(others.assign(m=pd.Series(mixed, dtype=object))))
    assert [{k: v for k, v in row.items() if k != "m"} for row in pushed] == expected
    assert [row.get("m") for row in pushed] == [value_text(v) for v in mixed]


@pytest.mark.parametrize("values", [
    pd.period_range("2024-01", periods=2, freq="M"),  # was the ordinals: 648, 649
    pd.interval_range(0, 2),  # was {"left":0,"right":1}
    [1 + 2j, 3j],  # was a 500 (Unsupported numpy type 15)
    [decimal.Decimal("1.10"), decimal.Decimal("2")],  # was padded: 2.00
], ids=["period", "interval", "complex", "decimal"])
def test_a_categorical_of_pandas_own_types_pushes_as_its_values(env, values):
    """As the plain column, as to_csv writes it; a missing value stays missing."""
    plain = pd.Series(values).reindex(range(len(values) + 1))
    expected = rows(push_frame(pd.DataFrame({"v": plain})))
    assert expected[-1] == {} and "v" in expected[0]
    assert rows(push_frame(pd.DataFrame({"v": pd.Categorical(plain)}))) == expected


def test_integers_with_gaps_made_none_push_as_integers(env, load_path):
    """NaN made None before a push, as for a database (df.replace({np.nan: None}) leaves an object column of
    Python floats): stored '3750.0', where the float column it came from stores '3750'. Other floats keep
    their '.0', as in a float column."""
    penguins = pd.read_json(io.StringIO(json.dumps(PENGUINS)))
    expected = rows(push_frame(penguins))
    for nones in (penguins.replace({np.nan: None}), penguins.astype(object).where(penguins.notna(), None)):
        assert nones["Body Mass (g)"].dtype == object
        assert rows(push_frame(nones)) == expected
    assert expected[0]["Body Mass (g)"] == "3750"
    floats = pd.DataFrame({"x": pd.Series([1.0, None, 2.5], dtype=object)})
    assert rows(push_frame(floats)) == [{"x": "1.0"}, {}, {"x": "2.5"}]


@pytest.mark.parametrize("make", [
    lambda: pd.DataFrame({"n": range(BATCH_ROWS + 2), "a": ["ok"] * (BATCH_ROWS + 1) + ["x\x00y"]},
                         index=range(5, BATCH_ROWS + 7)),  # in the second slice
    lambda: pa.table({"a": ["ok", "x\x00y"]}),
    lambda: pa.RecordBatchReader.from_batches(pa.schema([("a", pa.string())]),
                                              [pa.record_batch({"a": ["ok"]}), pa.record_batch({"a": ["x\x00y"]})]),
], ids=["pandas", "pyarrow", "stream"])
def test_a_nul_character_is_kept_on_sqlite_and_a_400_naming_its_column_and_row_on_postgresql(env, make):
    """PostgreSQL's refusal said only 'a value holds a NUL character': not which column, nor which of a
    million rows. SQLite keeps the value, as a Push of a file does (README)."""
    store = resources_for(environ=env)["virtual_files"]
    before = store.inventory()
    frame = make()
    where = BATCH_ROWS + 6 if isinstance(frame, pd.DataFrame) else 1
    if env["CONNECTOR_OPS_DATABASE_URL"].startswith("sqlite"):
        assert rows(push_frame(frame))[-1]["a"] == "x\x00y"
        return
    with pytest.raises(ConnectorError) as info:
        push_frame(frame)
    assert info.value.status == 400 and info.value.summary() == (
        f"etl.push failed (400): frame.a: the value at index {where} holds a NUL character (\\x00), which "
        "PostgreSQL cannot store")
    assert store.inventory() == before


@pytest.mark.parametrize("make", [
    lambda: pd.DataFrame({"v": [[1.5, float("nan")], {"a": float("nan")}]}),
    lambda: pl.DataFrame({"v": [[1.5, float("nan")], None]}),
    lambda: pa.table({"v": pa.array([[1.5, float("nan")], None])}),
    lambda: pl.DataFrame({"v": [[1.5, np.float32("nan")], {"a": float("nan")}]}, schema={"v": pl.Object}),
], ids=["pandas", "polars", "pyarrow", "polars-object"])
def test_a_nan_inside_a_list_is_json_null(env, make):
    """polars and pyarrow kept it as 'NaN', which no JSON reader takes, where pandas' own list gave null."""
    pushed = [row.get("v") for row in rows(push_frame(make()))]
    assert pushed[0] == "[1.5,null]" and pushed[1] in (None, '{"a":null}')


def test_no_columns_is_no_rows_both_ways(env):
    """Documented (docs/notebooks.md, Columns): a row without a value is nothing Arrow's read can hold."""
    frame = pd.DataFrame({"a": [1, 2, 3]})
    assert rows(push_frame(frame[[]])) == [] and rows(push_frame(pd.DataFrame(index=range(3)))) == []
    vf = push_frame(frame)
    assert pull_frame(vf, []).shape == (0, 0) and pull_frame(vf, [], kind="pyarrow").shape == (0, 0)
    assert pull_frame(vf, [], kind="polars").shape == (0, 0)
