"""DataFrames in and out through Arrow (connector_ops.push_frame / pull_frame, %etl push|pull --df): a frame
pushes exactly like the file it came from (missing stays missing, integers with gaps stay integers)."""

from __future__ import annotations

import io
import json

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from connector_ops import ConnectorError, invoke, pull_frame, push_frame
from connector_ops.environment import resources_for
from connector_ops.resources.virtual_files import sqlite_loader
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


def test_errors_are_the_actions_errors(env):
    with pytest.raises(ConnectorError) as info:
        push_frame("not a frame")
    assert info.value.status == 400
    assert info.value.summary().startswith("etl.push failed (400): frame: expected a pandas DataFrame, got str")
    with pytest.raises(ConnectorError) as info:
        pull_frame("nope")
    assert info.value.status == 500 and "not found" in info.value.summary()
    with pytest.raises(ConnectorError) as info:
        push_frame(pd.DataFrame([[1, 2]], columns=["a", "a"]))
    assert info.value.status == 400 and "column names must be unique" in info.value.summary()


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
    assert info.value.summary().startswith("etl.pull failed (400): columns: unknown column(s) ['zzz']")
    assert pull_frame(vf, ["b"], kind="pyarrow").to_pylist() == [{"b": "2"}]  # nothing else changed
