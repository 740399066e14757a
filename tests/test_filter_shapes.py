"""Filters of extreme shapes on both databases: wide ``$or``s of one column's values and of composite keys,
filters needing more bound values than a driver allows, thousands of ``$regex`` leaves (PostgreSQL's lock
table)."""

from __future__ import annotations

import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.resources.virtual_files.filters import LONG_IN, MAX_PARAMETERS, Match, Op, RowMatch, parse_filter


def test_an_or_of_one_columns_values_is_one_match():
    """Equality, ``$in``, ``null`` and ``$exists: false`` on one column under one ``$or`` (nested ``$or``s
    included) are one ``Match``, at the first one's place; other clauses stay as they were."""
    flt = {"$or": [{"a": "1"}, {"b": {"$gt": "x"}}, {"a": {"$in": ["2", "1", None]}},
                   {"$or": [{"a": {"$exists": False}}, {"c": "z"}, {"a": "3"}]}]}
    tree = parse_filter(flt)
    assert isinstance(tree, Op) and tree.kind == "or"
    assert tree.children[0] == Match("a", ("1", "2", "3"), missing=True)
    assert tree.children[2] == Match("c", ("z",))
    assert len(tree.children) == 3
    assert parse_filter({"$or": [{"a": "1"}, {"a": "2"}]}) == Match("a", ("1", "2"))


ROWS = [{"a": "1", "b": "x"}, {"a": "2"}, {"b": "y"}, {"a": "3", "b": "z"}, {"a": "", "b": "x"}]
MERGED_CASES = [
    ({"$or": [{"a": "1"}, {"a": None}]}, {0, 2}),
    ({"$or": [{"a": "1"}, {"a": {"$in": ["3", 3, None]}}, {"b": "x"}]}, {0, 2, 3, 4}),
    ({"$nor": [{"a": "1"}, {"a": {"$exists": False}}]}, {1, 3, 4}),
    ({"$nor": [{"a": "1"}, {"a": "2"}]}, {2, 3, 4}),
    ({"a": {"$not": {"$in": ["1"]}}, "$or": [{"a": "2"}, {"a": ""}, {"a": 2}]}, {1, 4}),
    ({"$or": [{"a": 1}, {"a": True}]}, set()),  # numbers and booleans never equal stored text
]


@pytest.mark.parametrize(("flt", "expected"), MERGED_CASES, ids=[str(c[0]) for c in MERGED_CASES])
def test_merged_or_clauses_select_what_mongodb_does(store, resources, flt, expected):
    vf = store.create_from_rows(ROWS)
    found = invoke("etl.query", {"virtualFileId": vf, "query": flt}, resources)["result"]
    assert found == [ROWS[i] for i in sorted(expected)]
    assert invoke("etl.delete_rows", {"virtualFileId": vf, "request": flt}, resources) == {
        "deletedCount": len(expected)}


def test_a_wide_or_of_equalities_answers_as_the_same_in(store, resources):
    """SQLite analysed 16,000 ``a = ?`` under ``$or`` in 13 s (quadratic; 40,000: 382 s) where the same
    ``$in`` took 0.1 s; merged into that ``$in`` (the test above), 20,000 clauses answer in about a second.
    Not timed here (timings belong to benchmarks/): the rows must be those of the ``$in``."""
    vf = store.create_from_rows([{"a": str(i)} for i in range(1000)])
    flt = {"$or": [{"a": str(i)} for i in range(20_000)]}
    found = invoke("etl.query", {"virtualFileId": vf, "query": flt}, resources)["result"]
    same = invoke("etl.query", {"virtualFileId": vf, "query": {"a": {"$in": [str(i) for i in range(20_000)]}}},
                  resources)["result"]
    assert found == same and len(found) == 1000


def test_an_or_of_composite_keys_is_one_row_match():
    """Clauses that are each equalities to one string on the same two or more columns (in any key order,
    through ``$eq``, a one-value ``$in`` or a nested ``$and``) are one ``RowMatch`` at the first one's
    place, duplicates once; any other clause keeps its place and shape."""
    flt = {"$or": [{"a": "1", "b": "2"}, {"c": "z"}, {"b": "4", "a": "3"},
                   {"$and": [{"a": {"$eq": "5"}}, {"b": {"$in": ["6"]}}]}, {"a": "1", "b": "2"},
                   {"a": "7", "b": None}, {"a": "8", "b": {"$exists": True}}, {"a": {"$in": ["1", "9"]}, "b": "2"},
                   {"a": "1", "c": "2"}, {"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": {"$gt": "2"}},
                   {"$and": [{"a": "1"}, {"a": "2"}, {"b": "3"}]}, {"$and": [{"a": "1"}, {"a": "1"}]}]}
    tree = parse_filter(flt)
    assert isinstance(tree, Op) and tree.kind == "or"
    assert tree.children[0] == RowMatch(("a", "b"), (("1", "2"), ("3", "4"), ("5", "6")))
    assert tree.children[1] == Match("c", ("z",))
    # one clause of a column set is not merged: it stays the AND it was
    assert tree.children[5] == parse_filter({"a": "1", "c": "2"})
    assert tree.children[6] == parse_filter({"a": "1", "b": "2", "c": "3"})
    assert tree.children[2:5] == tuple(parse_filter(f) for f in flt["$or"][5:8])
    assert tree.children[7:] == tuple(parse_filter(f) for f in flt["$or"][10:])
    assert parse_filter({"$or": [{"a": "1", "b": "2"}, {"b": "2", "a": "1"}]}) == parse_filter({"a": "1", "b": "2"})


KEY_ROWS = [
    {"d": "2024-01-01", "s": "7", "n": "0"},      # 0
    {"d": "2024-01-01", "s": "8", "n": "1"},      # 1
    {"d": "2024-01-02", "s": "7", "n": "2"},      # 2
    {"d": "2024-01-01", "n": "3"},                # 3  no store
    {"s": "7", "n": "4"},                         # 4  no date
    {"d": "é", "s": "ü", "n": "5"},               # 5  unicode, precomposed
    {"d": "e\u0301", "s": "u\u0308", "n": "6"},   # 6  the same letters decomposed: other code points
    {"d": "", "s": "", "n": "7"},                 # 7  empty strings are values, not missing
    {"d": "A", "s": "b", "n": "8"},               # 8
    {"d": "2024-01-02", "s": "7", "n": "9"},      # 9  the same key as row 2
]
#: keys no row has: a list this long is bound as arrays (one a column, or one JSON), not value by value
PADDING = [{"d": f"none{i}", "s": str(i)} for i in range(LONG_IN)]
KEY_CASES = [
    ({"$or": [{"d": "2024-01-01", "s": "7"}, {"s": "7", "d": "2024-01-02"}]}, {0, 2, 9}),
    ({"$or": [{"d": "2024-01-01", "s": "7"}, {"d": "2024-01-01", "s": "7"}, {"d": "2024-01-01", "s": "8"}]},
     {0, 1}),                                                         # duplicates harmless
    ({"$or": [{"d": "é", "s": "ü"}, {"d": "", "s": ""}]}, {5, 7}),   # code points, not canonical equivalence
    ({"$or": [{"d": "e\u0301", "s": "u\u0308"}, {"d": "a", "s": "b"}]}, {6}),  # case counts
    ({"$or": [{"d": "2024-01-01", "s": "7"}, {"d": "2024-01-01", "s": None}, {"d": "x", "s": "7"}]}, {0, 3}),
    ({"$or": [{"d": "2024-01-01", "s": "7"}, {"d": "A", "s": "b"}, {"n": {"$gte": "9"}},
              {"d": {"$exists": False}}, {"s": "8", "n": "1"}, {"s": "ü", "n": "5"}]}, {0, 1, 4, 5, 8, 9}),
    ({"$nor": [{"d": "2024-01-01", "s": "7"}, {"d": "2024-01-02", "s": "7"}]}, {1, 3, 4, 5, 6, 7, 8}),
    ({"d": {"$ne": "A"}, "$or": [{"d": "A", "s": "b"}, {"d": "", "s": ""}, {"d": 1, "s": "7"}]}, {7}),
    ({"$or": [{"d": "2024-01-01", "nope": "7"}, {"d": "2024-01-02", "nope": "7"}]}, set()),  # no such column
    ({"$nor": [{"d": "2024-01-01", "nope": "7"}, {"d": "2024-01-02", "nope": "7"}]}, set(range(10))),
    ({"$or": [{"d": "2024-01-01", "s": "7", "n": "0"}, {"n": "5", "s": "ü", "d": "é"}]}, {0, 5}),
]
KEY_CASES_BOTH = [(flt, expected, pad) for flt, expected in KEY_CASES for pad in (False, True)]


def _padded(flt: dict) -> dict:
    """``flt`` with the keys of ``PADDING`` in each ``$or``/``$nor`` of composite keys on ``d`` and ``s``."""
    out = dict(flt)
    for op in ("$or", "$nor"):
        if op in out and any(set(c) == {"d", "s"} for c in out[op]):
            out[op] = [*out[op], *PADDING]
    return out


@pytest.mark.parametrize(("flt", "expected", "pad"), KEY_CASES_BOTH,
                         ids=[f"{c[0]}{'-long' if c[2] else ''}" for c in KEY_CASES_BOTH])
def test_an_or_of_composite_keys_selects_what_mongodb_does(store, resources, flt, expected, pad):
    """Rows missing one of the key's columns never match (and do under ``$nor``), in Query and Delete
    Rows, rows in their order; short lists as VALUES, long ones as arrays: the same rows."""
    import mongomock

    if pad:
        flt = _padded(flt)
    coll = mongomock.MongoClient().db.rows
    coll.insert_many([{"_id": i, **r} for i, r in enumerate(KEY_ROWS)])
    assert {d["_id"] for d in coll.find(flt)} == expected  # the expectations are MongoDB's
    vf = store.create_from_rows(KEY_ROWS)
    found = invoke("etl.query", {"virtualFileId": vf, "query": flt}, resources)["result"]
    assert found == [KEY_ROWS[i] for i in sorted(expected)]
    assert invoke("etl.delete_rows", {"virtualFileId": vf, "request": flt, "dryRun": True},
                  resources) == {"deletedCount": len(expected)}
    assert invoke("etl.delete_rows", {"virtualFileId": vf, "request": flt}, resources) == {
        "deletedCount": len(expected)}
    assert store.rows(vf) == [r for i, r in enumerate(KEY_ROWS) if i not in expected]


@pytest.mark.parametrize("pad", [False, True], ids=["short", "long"])
def test_composite_keys_holding_a_nul_find_the_values_sqlite_keeps(tmp_path, pad):
    """SQLite keeps a NUL in a value, and its JSON functions end a text there: a long list holding one goes
    as hex, as a long ``$in`` does (PostgreSQL refuses the operand, tested with the other NUL operands)."""
    from tests.conftest import resources_on

    resources = resources_on(f"sqlite:///{tmp_path / 'store.db'}", tmp_path / "home")
    rows = [{"d": "x\x00y", "s": "1"}, {"d": "x", "s": "1"}, {"d": "x\x00y", "s": "2"}]
    vf = resources["virtual_files"].create_from_dicts([rows])
    flt = {"$or": [{"d": "x\x00y", "s": "1"}, {"d": "x", "s": "\x00"}, *(PADDING if pad else [])]}
    assert invoke("etl.query", {"virtualFileId": vf, "query": flt}, resources)["result"] == [rows[0]]
    assert invoke("etl.query", {"virtualFileId": vf, "query": {"$nor": flt["$or"]}}, resources)["result"] == rows[1:]


def test_sixteen_thousand_composite_keys_bind_two_arrays(store, resources):
    """An ``$or`` of 16,000 two-column keys bound 32,000 values, past ``MAX_PARAMETERS``: a 400. As one
    row-value membership it binds one array a column (one JSON on SQLite), so it answers, in Query and
    Delete Rows, the same rows as the ``$in`` of the one column that decides here."""
    rows = [{"a": str(i), "b": str(i % 3), "c": "x"} for i in range(3000)]
    vf = store.create_from_rows(rows)
    keys = [{"a": str(i), "b": str(i % 3)} for i in range(0, 32_000, 2)]  # half of them no row has
    keys[1] = {"b": "0", "a": "2"}  # a = 2 has b = 2: no row
    flt = {"$or": keys}
    expected = [r for r in rows if int(r["a"]) % 2 == 0 and r["a"] != "2"]
    assert invoke("etl.query", {"virtualFileId": vf, "query": flt}, resources)["result"] == expected
    assert invoke("etl.delete_rows", {"virtualFileId": vf, "request": flt}, resources) == {
        "deletedCount": len(expected)}
    assert store.rows(vf) == [r for r in rows if r not in expected]


def _wide(clauses: int) -> dict:
    """An ``$or`` no merging narrows: each clause ``$in`` of 100 values AND a comparison (101 values)."""
    return {"$or": [{"a": {"$in": [str(i * 100 + j) for j in range(100)]}, "b": {"$gte": ""}}
                    for i in range(clauses)]}


def test_a_filter_past_the_drivers_parameter_limits_binds_its_lists_as_arrays(store, resources):
    """700 clauses of 101 values bound 70,700 parameters: a 500 on PostgreSQL (65,535 a statement; SQLite
    takes 250,000 in this build, 32,766 in its default one, and 2,600 clauses failed there). Past
    ``MAX_PARAMETERS`` every list is one array parameter (what SQLite binds: counted below). The repro's
    own shape, 700 ``$in`` lists of one column, is one merged ``$in`` now."""
    vf = store.create_from_rows([{"a": str(i), "b": str(i)} for i in range(1000)])
    flt = _wide(700)
    found = invoke("etl.query", {"virtualFileId": vf, "query": flt}, resources)["result"]
    assert len(found) == 1000
    merged = {"$or": [{"a": {"$in": [str(i * 100 + j) for j in range(100)]}} for i in range(700)]}
    assert len(invoke("etl.query", {"virtualFileId": vf, "query": merged}, resources)["result"]) == 1000
    assert invoke("etl.delete_rows", {"virtualFileId": vf, "request": flt}, resources) == {"deletedCount": 1000}


def test_a_filter_needing_more_values_than_one_filter_may_bind_is_a_400(store, resources):
    vf = store.create_from_rows([{"a": "1", "b": "1"}])
    # 70,000 values, no list to make one (composite keys of equalities would be one, tested above)
    flt = {"$or": [{"a": str(i), "b": {"$gte": str(i)}} for i in range(35_000)]}
    for action, field in (("etl.query", "query"), ("etl.delete_rows", "request")):
        with pytest.raises(ConnectorError) as info:
            invoke(action, {"virtualFileId": vf, field: flt}, resources)
        assert info.value.status == 400
        assert info.value.message.startswith(f"{field}: ")
        assert "70,000 bound values" in info.value.message and f"{MAX_PARAMETERS:,}" in info.value.message
    assert store.count(vf) == 1


COUNTED = [
    {"a": "1"},
    {"a": {"$in": ["1", "2", "3"]}, "b": {"$nin": ["x", None]}},
    {"a": {"$in": [str(i) for i in range(150)]}},
    {"$or": [{"a": {"$gt": "1"}}, {"b": {"$regex": "^x"}}, {"a": {"$exists": False}}]},
    {"$nor": [{"a": {"$in": ["1", "2"]}, "b": "y"}, {"c": {"$lte": "q"}}]},
    {"nope": "x", "a": {"$ne": "2"}},
    {"$or": [{"a": "1", "b": "2"}, {"b": "4", "a": "3"}, {"c": "5"}]},
    {"$nor": [{"a": str(i), "b": str(i), "c": "x"} for i in range(150)]},
    {"$or": [{"a": str(i), "nope": str(i)} for i in range(3)]},
]


#: a ``$regex`` on PostgreSQL is matched through a connection (and binds no value there): SQLite's only
COUNTED_ON = [(dialect, flt) for dialect in ("sqlite", "postgresql") for flt in COUNTED
              if not (dialect == "postgresql" and "$regex" in str(flt))]


@pytest.mark.parametrize("long_in", [1, 100])
@pytest.mark.parametrize(("dialect", "flt"), COUNTED_ON, ids=[f"{d}-{f}" for d, f in COUNTED_ON])
def test_the_count_of_bound_values_is_never_below_what_the_sql_binds(dialect, long_in, flt):
    """``_parameters`` decides before compiling; it must not undercount what ``_to_sql`` binds."""
    import sqlalchemy as sa
    from sqlalchemy.dialects import postgresql, sqlite

    from connector_ops.resources.virtual_files.catalog import row_table
    from connector_ops.resources.virtual_files.filters import _parameters, _regex_matcher, _to_sql

    table = row_table("vf_x", [0, 1, 2])
    columns = {"a": table.c.c0, "b": table.c.c1, "c": table.c.c2}
    tree = parse_filter(flt)
    where = _to_sql(tree, columns, exact=False, dialect=dialect, regex=_regex_matcher(dialect, None, tree, columns),
                    long_in=long_in)
    compiled = sa.select(table.c.seq).where(where).compile(
        dialect=(sqlite if dialect == "sqlite" else postgresql).dialect(),
        compile_kwargs={"render_postcompile": True})
    assert _parameters(tree, long_in) >= len(compiled.positiontup or compiled.params)


def test_thousands_of_regex_leaves_take_one_temporary_table_on_postgresql(postgres_resources):
    """Each ``$regex`` leaf had a temporary table (and a scan) of its own, all in one transaction: an
    ``$or`` of 5,000 filled the server's shared lock table (500 after ≈ 50 s, other sessions refused
    locks meanwhile). All leaves are found in one read, into one table, whose leaf numbers keep them apart."""
    import sqlalchemy as sa

    from connector_ops.resources.virtual_files.filters import compile_filter

    store = postgres_resources["virtual_files"]
    vf = store.create_from_dicts([[{"a": str(i), "b": f"x{i}"} for i in range(1000)]])
    flt = {"$or": [*({"a": {"$regex": f"^{i}$"}} for i in range(0, 2000, 2)),
                   *({"b": {"$regex": f"^X{i}$", "$options": "i"}} for i in range(1, 2000, 2)),
                   {"nope": {"$regex": "."}}],
           "b": {"$not": {"$regex": "5"}}}
    expected = [{"a": str(i), "b": f"x{i}"} for i in range(1000) if "5" not in str(i)]
    with store.sql.reading() as conn:
        info = store.sql.info(conn, vf)
        where = compile_filter(flt, info.column_map(info.table), dialect="postgresql", conn=conn)
        tables = conn.exec_driver_sql("SELECT count(*) FROM pg_class WHERE relname LIKE 'cop_rx_%%' "
                                      "AND relpersistence = 't' AND relkind = 'r'").scalar_one()
        locks = conn.exec_driver_sql("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()").scalar_one()
        assert tables == 1 and locks < 100, (tables, locks)
        seqs = conn.execute(sa.select(info.table.c.seq).where(where).order_by(info.table.c.seq)).scalars().all()
        assert seqs == [i + 1 for i in range(1000) if "5" not in str(i)]
    flt = {"$or": [{"a": {"$regex": f"^{i}$"}} for i in range(5000)]}
    assert len(invoke("etl.query", {"virtualFileId": vf, "query": flt}, postgres_resources)["result"]) == 1000
    assert invoke("etl.query", {"virtualFileId": vf, "query": {"b": {"$not": {"$regex": "5"}}}},
                  postgres_resources)["result"] == expected


def test_an_and_of_hundreds_of_regex_leaves_answers_on_postgresql(postgres_url, tmp_path):
    """Each ``$regex`` leaf is an ``EXISTS`` on the matches' table; PostgreSQL made every one of an ``$and``
    a semi-join and searched their join order, in time growing as the cube of the leaves (150 leaves on a
    2-row file: 20 s; 300 here would take minutes, past the statement timeout set for this test)."""
    from tests.conftest import resources_on

    resources = resources_on(postgres_url, tmp_path / "home", options="-c statement_timeout=15000")
    store = resources["virtual_files"]
    names = [f"c{i}" for i in range(300)]
    vf = store.create_from_dicts([[dict.fromkeys(names, "x"), {**dict.fromkeys(names, "x"), "c7": "y"}]])
    across = {"$and": [{n: {"$regex": "^x"}} for n in names]}
    found = invoke("etl.query", {"virtualFileId": vf, "query": across}, resources)["result"]
    assert found == [dict.fromkeys(names, "x")]
    one = {"$and": [{"c7": {"$regex": f"y|{i}"}} for i in range(300)]}
    assert invoke("etl.query", {"virtualFileId": vf, "query": one}, resources)["result"] == [
        {**dict.fromkeys(names, "x"), "c7": "y"}]


def test_a_long_list_of_composite_keys_is_probed_by_a_scan_not_an_index_search_on_sqlite(tmp_path):
    """SQLite takes ``json_each`` (the list past ``LONG_IN`` keys) for a few rows: with an index on one of
    the key's columns, which a Query on that column builds, it searched that index key by key, each search
    reading every row of that value (4,000 keys of ``(id, city)`` over 1M rows: 1.6 s; the scan probing the
    list 0.25 s). The plan, not a timing: the table scanned, the list probed, no index searched."""
    import sqlalchemy as sa

    from connector_ops.resources.virtual_files.filters import compile_filter
    from tests.conftest import resources_on
    from tests.virtual_files import StoreForTests

    resources = resources_on(f"sqlite:///{tmp_path / 'vf.db'}", tmp_path / "home")
    store = StoreForTests.of(resources["virtual_files"])
    vf = store.create_from_rows({"a": str(i), "b": str(i % 5)} for i in range(2000))
    invoke("etl.query", {"virtualFileId": vf, "query": {"b": "1"}}, resources)  # b's index built
    keys = {"$or": [{"a": str(i), "b": str(i % 5)} for i in range(LONG_IN + 1)]}
    with store.sql.reading() as conn:
        info = store.sql.info(conn, vf)
        indexes = conn.exec_driver_sql(f"PRAGMA index_list('{info.table_name}')").fetchall()
        assert any(row[1].endswith("_c1") for row in indexes)  # b's
        where = compile_filter(keys, info.column_map(), dialect="sqlite")
        statement = sa.select(info.table.c.seq).where(where).compile(conn)
        plan = [row[3] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}",
                                                        tuple(statement.params.values()))]
    assert not any("USING INDEX" in step for step in plan), plan
    assert any(step.startswith("SCAN") for step in plan) and any("LIST SUBQUERY" in step for step in plan), plan
    assert len(invoke("etl.query", {"virtualFileId": vf, "query": keys}, resources)["result"]) == LONG_IN + 1
