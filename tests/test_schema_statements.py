"""The DDL a write issues, on both databases: a new file's row table is one ``CREATE TABLE`` holding the
columns its first rows bring, never an empty table grown by ``ALTER TABLE … ADD COLUMN`` (on SQLite each
re-reads the whole schema, one table per virtual file); an existing file gets a batch's new columns together."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from connector_ops import invoke

TEN = {f"col{i}": f"v{i}" for i in range(10)}


@contextlib.contextmanager
def ddl(engine: sa.Engine) -> Iterator[list[str]]:
    """The CREATE TABLE and ADD COLUMN statements ``engine`` sends while the block runs (not PostgreSQL's
    primary key, added after the rows: :mod:`.keys_after`)."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if re.match(r"\s*(CREATE TABLE|ALTER TABLE .* ADD COLUMN)", statement, re.IGNORECASE | re.DOTALL):
            seen.append(" ".join(statement.split()))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def push(files: Any, data: bytes, name: str) -> str:
    pf = files.add_bytes(data, name).to_json()
    return invoke("etl.push", {"platformFile": pf})["virtualFileId"]


def test_a_json_or_ndjson_push_creates_its_table_with_every_column(files, store, env):
    for data, name in ((json.dumps([TEN]).encode(), "ten.json"), (json.dumps(TEN).encode() + b"\n", "ten.ndjson")):
        with ddl(store.engine) as statements:
            vf = push(files, data, name)
        assert len(statements) == 1 and statements[0].startswith("CREATE TABLE"), statements
        assert all(f"c{i} TEXT" in statements[0] for i in range(10))
        assert store.columns(vf) == list(TEN) and store.rows(vf) == [TEN]


def test_keys_of_later_rows_in_the_first_batch_join_the_create_table(files, store, env):
    rows = [{"a": "1"}, {"b": "2", "a": "3"}, {"c": "4"}]
    with ddl(store.engine) as statements:
        vf = push(files, json.dumps(rows).encode(), "mixed.json")
    assert [s.split()[0] for s in statements] == ["CREATE"]
    assert store.columns(vf) == ["a", "b", "c"] and store.rows(vf) == rows


def test_an_empty_push_still_makes_a_readable_file(files, store, env):
    vf = push(files, b"[]", "empty.json")
    assert store.columns(vf) == [] and store.count(vf) == 0 and store.rows(vf) == []


def test_a_map_creates_its_table_with_every_new_column(files, store, env):
    vf = push(files, json.dumps([{"x": "a"}, {"x": "b"}]).encode(), "x.json")
    for overwrite in (False, True):
        with ddl(store.engine) as statements:
            out = invoke("etl.map", {"virtualFileId": vf, "action": "upper(x) | rename(x=y)",
                                     "overwriteVirtualFile": overwrite})["virtualFileId"]
        assert [s.split()[0] for s in statements] == ["CREATE"], statements
        assert store.rows(out) == [{"y": "A"}, {"y": "B"}]
    assert out == vf


def test_append_rows_adds_a_batchs_new_columns_together(files, store, env):
    vf = push(files, json.dumps([{"x": "a"}]).encode(), "x.json")
    with ddl(store.engine) as statements:
        invoke("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"x": "b", "p": "1", "q": "2"}},
                                            {"virtualFileId": vf, "content": {"r": "3"}}]})
    if store.engine.dialect.name == "postgresql":  # one statement for the three columns
        assert len(statements) == 1 and statements[0].count("ADD COLUMN") == 3, statements
    else:  # SQLite takes one column per ALTER
        assert [s.count("ADD COLUMN") for s in statements] == [1, 1, 1], statements
    assert store.columns(vf) == ["x", "p", "q", "r"]
    assert store.rows(vf) == [{"x": "a"}, {"x": "b", "p": "1", "q": "2"}, {"r": "3"}]
