"""Map on both databases: built-ins and their syntax, @map_action, package.module:function, failures."""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.etl import map_action
from tests.virtual_files import StoreForTests

ROWS = [
    {"first": " Ann ", "last": "Lee", "email": "ANN@X.ORG", "age": " 007", "vip": "Yes"},
    {"first": "Bob", "email": "bob@x.org", "age": "", "vip": "0"},
    {"first": "Cy", "last": "Do", "price": "1.50"},
]


@map_action("test_add_initial")
def add_initial(row, column="first", target="initial"):
    if row.get(column):
        row[target] = row[column][0]
    return row


def shout(row, *columns):
    """Used as tests.test_etl_map:shout(…)."""
    return {k: (v + "!" if k in columns else v) for k, v in row.items()}


def drop_without_last(row):
    return row if "last" in row else None


def explode_on_bob(row):
    if row.get("first") == "Bob":
        raise ValueError("no Bobs")
    return {**row, "seen": 1}


def not_a_row(row):
    return ["a"]


def run(store, resources, action: str, overwrite: bool = False, rows=ROWS) -> tuple[str, str, list]:
    vf = store.create_from_rows(rows)
    out = invoke("etl.map", {"virtualFileId": vf, "action": action, "overwriteVirtualFile": overwrite}, resources)
    return vf, out["virtualFileId"], store.rows(out["virtualFileId"])


@pytest.mark.parametrize(("action", "expected"), [
    ("trim(first, age) | keep(first, age)",
     [{"first": "Ann", "age": "007"}, {"first": "Bob", "age": ""}, {"first": "Cy"}]),
    ("lower(email) | keep(email)", [{"email": "ann@x.org"}, {"email": "bob@x.org"}, {}]),
    ("upper | keep(first, last)", [{"first": " ANN ", "last": "LEE"}, {"first": "BOB"}, {"first": "CY", "last": "DO"}]),
    ("rename(first=given, last=family) | keep(given, family)",
     [{"given": " Ann ", "family": "Lee"}, {"given": "Bob"}, {"given": "Cy", "family": "Do"}]),
    ("drop(email, age, vip, price)",
     [{"first": " Ann ", "last": "Lee"}, {"first": "Bob"}, {"first": "Cy", "last": "Do"}]),
    ('default(last="n/a", age=0) | keep(last, age)',
     [{"last": "Lee", "age": " 007"}, {"last": "n/a", "age": "0"}, {"last": "Do", "age": "0"}]),
    ("cast(age=integer, vip=boolean, price=float) | keep(age, vip, price)",
     [{"age": "7", "vip": "true"}, {"age": "", "vip": "false"}, {"price": "1.5"}]),
    ('trim | concat(name, first, last, sep=" ") | keep(name)',
     [{"name": "Ann Lee"}, {"name": "Bob"}, {"name": "Cy Do"}]),
    ('set("a, b"=x) | keep("a, b")', [{"a, b": "x"}] * 3),
    ("test_add_initial(target=i) | keep(i)", [{"i": " "}, {"i": "B"}, {"i": "C"}]),
    ("tests.test_etl_map:shout(last) | keep(last)", [{"last": "Lee!"}, {}, {"last": "Do!"}]),
    ("tests.test_etl_map:drop_without_last | keep(first)", [{"first": " Ann "}, {"first": "Cy"}]),
])
def test_builtins_registered_and_imported_functions(store, resources, action, expected):
    source, target, rows = run(store, resources, action)
    assert target != source
    assert rows == expected
    assert store.rows(source) == ROWS  # overwrite off: the source is untouched


def test_rename_keeps_the_column_position(store, resources):
    _, _, rows = run(store, resources, "rename(last=family)")
    assert list(rows[0]) == ["first", "family", "email", "age", "vip"]


def test_overwrite_replaces_rows_in_place_and_restarts_iteration(store, resources):
    source, target, rows = run(store, resources, "keep(first) | upper", overwrite=True)
    assert target == source
    assert rows == [{"first": " ANN "}, {"first": "BOB"}, {"first": "CY"}]
    assert store.columns(source) == ["first"]


def test_map_streams_across_batches_and_converts_values(store, resources, monkeypatch):
    from connector_ops.etl import mapping

    monkeypatch.setattr(mapping, "BATCH", 4)
    rows = [{"n": str(i)} for i in range(10)]
    _, _, out = run(store, resources, "tests.test_etl_map:explode_on_bob", rows=rows)
    assert out == [{"n": str(i), "seen": "1"} for i in range(10)]


def widen_sometimes(row):
    """New columns in some rows only, values of every JSON type, sometimes a missing (None) value."""
    n = int(row["n"])
    if n % 3 == 1:
        row["third"] = n // 3
    if n % 4 == 2:
        row["flag"], row["n"] = n > 5, None
    return row


def test_new_columns_mid_batch_and_non_text_values(store, resources, monkeypatch):
    from connector_ops.etl import mapping

    monkeypatch.setattr(mapping, "BATCH", 4)
    _, _, out = run(store, resources, "tests.test_etl_map:widen_sometimes", rows=[{"n": str(i)} for i in range(11)])
    expected = []
    for i in range(11):
        row = {"n": str(i)} if i % 4 != 2 else {}
        if i % 3 == 1:
            row["third"] = str(i // 3)
        if i % 4 == 2:
            row["flag"] = "true" if i > 5 else "false"
        expected.append(row)
    assert out == expected


def reshape_by_mode(row):
    """What ``mode`` says: keep the row, drop a key, add one, swap one, make a value missing, or drop the row."""
    mode = row.get("mode")
    if mode == "drop_key":
        row.pop("b", None)
    elif mode == "add_key":
        row["extra"] = row["a"] + "+"
    elif mode == "swap_key":  # as many keys as the file has columns, but not the same ones
        row["extra"] = row.pop("b")
    elif mode == "missing":
        row["b"] = None
    elif mode == "no_row":
        return None
    return row


@pytest.mark.parametrize("seed", range(3))
def test_pages_of_whole_rows_and_pages_of_other_rows_are_written_alike(store, resources, monkeypatch, seed):
    """A page whose rows all have exactly the file's columns is aligned in one go, any other page row by
    row: random runs of both, pages of 4, give the rows the function returned, a missing value left out."""
    import random

    from connector_ops.etl import mapping

    monkeypatch.setattr(mapping, "BATCH", 4)
    rng = random.Random(seed)
    choices, modes = ["keep", "drop_key", "add_key", "swap_key", "missing", "no_row"], []
    while len(modes) < 120:  # runs of whole pages of "keep" between pages of mixed rows
        modes += ["keep"] * 4 * rng.randint(0, 3) + [rng.choice(choices) for _ in range(rng.randint(1, 6))]
    rows = [{"a": f"a{i}", "b": rng.choice(["", "b", "é"]), "mode": mode} for i, mode in enumerate(modes)]
    _, _, out = run(store, resources, "tests.test_etl_map:reshape_by_mode", rows=rows)
    returned = (reshape_by_mode(dict(row)) for row in rows)
    assert out == [{k: v for k, v in row.items() if v is not None} for row in returned if row is not None]


def failed_map(store, resources, action: str, overwrite: bool) -> ConnectorError:
    """Map ``action`` over ``ROWS``, which must fail; the file and the set of files are as they were."""
    vf = store.create_from_rows(ROWS)
    with store.reading() as conn:
        files_before = conn.exec_driver_sql("SELECT count(*) FROM cop_virtual_file").scalar()
    with pytest.raises(ConnectorError) as info:
        invoke("etl.map", {"virtualFileId": vf, "action": action, "overwriteVirtualFile": overwrite}, resources)
    assert store.rows(vf) == ROWS
    with store.reading() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM cop_virtual_file").scalar() == files_before
    return info.value


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_failing_function_names_the_row_and_changes_nothing(store, resources, overwrite, monkeypatch):
    from connector_ops.etl import mapping

    monkeypatch.setattr(mapping, "BATCH", 1)  # the failure comes after earlier batches were written
    error = failed_map(store, resources, "tests.test_etl_map:explode_on_bob", overwrite)
    assert error.status == 500
    assert error.message == "row 2: tests.test_etl_map:explode_on_bob failed: ValueError: no Bobs"
    # the failure broke off a COPY (PostgreSQL) mid-stream: the connections it left behind work
    _, _, rows = run(store, resources, "upper(first) | keep(first)", overwrite=overwrite)
    assert rows == [{"first": " ANN "}, {"first": "BOB"}, {"first": "CY"}]


def widen_at(row):
    """New columns from two rows on, in the middle of a page and of a slice; some values dropped."""
    n = int(row["n"])
    if n >= 1_500:
        row["late"] = f"l{n}"
    if n >= 2_222:
        row["later"], row["n"] = str(n % 7), None
    return row


def test_new_columns_in_the_middle_of_long_pages(store, resources):
    """Rows stream to the new file a slice at a time (``MAP_SLICE``) and, on PostgreSQL, through one
    ``COPY`` until a row brings new columns: that row starts the next one, wherever it falls."""
    _, _, out = run(store, resources, "tests.test_etl_map:widen_at", rows=[{"n": str(i)} for i in range(3_000)])
    expected = []
    for n in range(3_000):
        row = {"n": str(n)} if n < 2_222 else {}
        if n >= 1_500:
            row["late"] = f"l{n}"
        if n >= 2_222:
            row["later"] = str(n % 7)
        expected.append(row)
    assert out == expected


OPEN_COPIES: dict[str, Any] = {}


def count_open_copies(row):
    """At row 2,500 (past the first slices), the ``COPY`` statements other sessions have open."""
    if row["n"] == "2500":
        with psycopg.connect(OPEN_COPIES["dsn"]) as conn:
            OPEN_COPIES["seen"] = conn.execute(
                "SELECT query FROM pg_stat_activity WHERE query LIKE 'COPY %' AND pid <> pg_backend_pid()"
                " AND state = 'active'").fetchall()
    return row


def test_map_stores_rows_while_its_function_runs_on_postgresql(postgres_resources, postgres_url):
    """The function runs on one slice while the server stores the slices before it: the output's ``COPY``
    stays open across slices (the source is read on a second connection, on the writer's snapshot).
    Opened and closed around each page, it made the two take turns (1M rows: 1.05× the raw loop, now
    0.74–0.82×).
    The reader's connection goes back to the pool as it came: read-write, read committed."""
    store = StoreForTests.of(postgres_resources["virtual_files"])
    OPEN_COPIES.update(dsn=postgres_url.replace("postgresql+psycopg://", "postgresql://", 1), seen=None)
    _, _, rows = run(store, postgres_resources, "tests.test_etl_map:count_open_copies",
                     rows=[{"n": str(i)} for i in range(3_000)])
    assert rows == [{"n": str(i)} for i in range(3_000)]
    assert OPEN_COPIES["seen"] and all(query.startswith("COPY ") and "FROM STDIN" in query
                                       for query, in OPEN_COPIES["seen"]), OPEN_COPIES["seen"]
    engine = store.sql.engine
    assert engine.pool.checkedin() >= 2  # the Map's two connections, back in the pool
    with contextlib.ExitStack() as stack:  # every idle connection at once, so the Map's two among them
        for conn in [stack.enter_context(engine.connect()) for _ in range(engine.pool.checkedin())]:
            assert conn.exec_driver_sql("SHOW transaction_read_only").scalar_one() == "off"
            assert conn.exec_driver_sql("SHOW transaction_isolation").scalar_one() == "read committed"


def test_a_function_returning_a_non_row_and_a_failing_cast(store, resources):
    vf = store.create_from_rows(ROWS)
    with pytest.raises(ConnectorError) as info:
        invoke("etl.map", {"virtualFileId": vf, "action": "tests.test_etl_map:not_a_row"}, resources)
    assert info.value.status == 500
    assert info.value.message.startswith("row 1: ") and "returned list" in info.value.message
    with pytest.raises(ConnectorError) as info:
        invoke("etl.map", {"virtualFileId": vf, "action": "cast(first=integer)"}, resources)
    assert info.value.message == "row 1: cast(first=integer) failed: ValueError: cast: first=' Ann ' is not an integer"


def test_cast_to_float_writes_every_digit_without_an_exponent_as_validate_reads_a_float(store, resources):
    values = ["1.50", "10", " -.5", "0.00001", "1E-5", "1e3", "123456789012345678", "3.14159265358979323846"]
    *_, rows = run(store, resources, "cast(x=float)", rows=[{"x": v} for v in values])
    assert [r["x"] for r in rows] == ["1.5", "10.0", "-0.5", "0.00001", "0.00001", "1000.0",
                                      "123456789012345678.0", "3.14159265358979323846"]
    assert invoke("etl.validate", {"content": rows, "schema": {"x": {"type": "float"}}}, resources)["rejected"] == []
    vf = store.create_from_rows([{"x": "1"}, {"x": "1e400"}])
    with pytest.raises(ConnectorError) as info:
        invoke("etl.map", {"virtualFileId": vf, "action": "cast(x=float)"}, resources)
    assert info.value.message == ("row 2: cast(x=float) failed: ValueError: cast: x='1e400' is out of a float's "
                                  "range (exponents -308 to 308)")
    assert store.rows(vf) == [{"x": "1"}, {"x": "1e400"}]


def half_a_pair(row):
    """An emoji cut in half, as slicing UTF-16 text can leave it."""
    row["first"] = "\ud83d"
    return row


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_function_returning_half_a_surrogate_pair_is_a_400_and_changes_nothing(store, resources, overwrite):
    error = failed_map(store, resources, "tests.test_etl_map:half_a_pair", overwrite)
    assert error.status == 400, error.summary()
    assert error.message == ("tests.test_etl_map:half_a_pair returned what the database cannot store: a value "
                             "holds \\ud83d, half of a UTF-16 surrogate pair without its other half, which is "
                             "not a character")


def wrong_then_failing(row):
    """Row 2 returns something that is not a row; row 3 raises; the others are fine."""
    if row["n"] == "1":
        return {"n": 1.5, 2: "x"}
    if row["n"] == "2":
        raise RuntimeError("row 3 fails")
    return row


def test_the_first_problem_of_a_page_is_the_one_reported(store, resources):
    """Rows are checked a page at a time, after the function has run on the page: a row it raised on is
    reported only when no row before it returned something wrong."""
    vf = store.create_from_rows([{"n": str(i)} for i in range(5)])
    with pytest.raises(ConnectorError) as info:
        invoke("etl.map", {"virtualFileId": vf, "action": "tests.test_etl_map:wrong_then_failing"}, resources)
    assert info.value.message == ("row 2: tests.test_etl_map:wrong_then_failing returned a non-string column "
                                  "name 2")


@pytest.mark.parametrize(("action", "problem"), [
    ("nope", "unknown map action 'nope'"),
    ("trim |", "expected a step name"),
    ("trim(a", "expected ',' or ')'"),
    ("rename(a)", "rename: takes old=new pairs"),
    ("cast(a=date)", "cast: unknown type(s)"),
    ("keep", "keep: name the columns to keep"),
    ("concat(a)", "concat: concat(target"),
    ("rename(a=b, a=c)", "'a' is given twice"),
    ('set(a="x)', "unterminated or invalid quoted string"),
    ("no_such_module_xyz:fn", "cannot import 'no_such_module_xyz'"),
    ("tests.test_etl_map:missing", "has no attribute 'missing'"),
    ("tests.test_etl_map:ROWS", "is not callable"),
    ("tests.test_etl_map:drop_without_last(x)", "arguments do not fit"),
    ("test_add_initial(a, b, c)", "arguments do not fit"),
])
def test_bad_actions_are_400_before_anything_changes(store, resources, action, problem):
    vf = store.create_from_rows(ROWS)
    with pytest.raises(ConnectorError) as info:
        invoke("etl.map", {"virtualFileId": vf, "action": action, "overwriteVirtualFile": True}, resources)
    assert info.value.status == 400
    assert info.value.message.startswith("action: ") and problem in info.value.message, info.value.message
    assert store.rows(vf) == ROWS


def test_unknown_virtual_file_is_500(store, resources):
    with pytest.raises(ConnectorError) as info:
        invoke("etl.map", {"virtualFileId": "nope", "action": "trim"}, resources)
    assert info.value.status == 500 and "not found" in info.value.message


def test_rename_onto_an_existing_column_fails_and_changes_nothing(files, env):
    pf = files.add_bytes(b"mail,email\na@x,b@x\n", "c.csv").to_json()
    vf = invoke("etl.push", {"platformFile": pf})["virtualFileId"]
    with pytest.raises(ConnectorError) as info:
        invoke("etl.map", {"virtualFileId": vf, "action": "rename(mail=email)", "overwriteVirtualFile": True})
    assert info.value.status == 500 and "rename: column 'email' already exists" in info.value.body["message"]
    assert invoke("etl.iterate", {"content": vf, "maxBatchSize": 5})["content"] == [{"mail": "a@x", "email": "b@x"}]


def test_a_function_calling_sys_exit_is_a_clear_failure(files, env):
    pf = files.add_bytes(b"a\n1\n", "a.csv").to_json()
    vf = invoke("etl.push", {"platformFile": pf})["virtualFileId"]
    with pytest.raises(ConnectorError) as info:
        invoke("etl.map", {"virtualFileId": vf, "action": "sys:exit"})
    assert info.value.status == 500 and "row 1: sys:exit failed: SystemExit" in info.value.body["message"]
