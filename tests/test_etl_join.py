"""Join on both databases, compared with pandas.merge on random data with duplicate, missing and empty keys."""

from __future__ import annotations

import io
import random
import unicodedata

import pandas as pd
import pytest

from connector_ops import ConnectorError, invoke

KEYS = ["1", "2", "3", "4", "", None, "01", "A", "a"]


def random_rows(rng: random.Random, n: int, key: str, value: str) -> list[dict[str, str]]:
    rows = []
    for i in range(n):
        row = {key: rng.choice(KEYS), value: f"{value}{i}", "name": rng.choice(["x", "y", None])}
        rows.append({k: v for k, v in row.items() if v is not None})
    return rows


def expected(left: list[dict], right: list[dict], how: str) -> tuple[list[dict], list[dict]]:
    """pandas.merge with missing/empty keys made unique (pandas would match None with None and "" with "")."""
    lf = pd.DataFrame([{**r, "_l": i} for i, r in enumerate(left)], columns=["k", "a", "name", "_l"])
    rf = pd.DataFrame([{**r, "_r": i} for i, r in enumerate(right)], columns=["key", "b", "name", "_r"])
    lf["_k"] = [k if isinstance(k, str) and k else f"\0left{i}" for i, k in enumerate(lf["k"])]
    rf["_k"] = [k if isinstance(k, str) and k else f"\0right{i}" for i, k in enumerate(rf["key"])]
    merged = pd.merge(lf, rf, on="_k", how=how, suffixes=("_L", "_R"), indicator=True)
    merged = merged.sort_values(["_l", "_r"], na_position="last")
    out = [{c: v for c, v in row.items() if isinstance(v, str)}
           for row in merged[["k", "a", "name_L", "key", "b", "name_R"]].to_dict("records")]
    flagged = pd.merge(lf, rf[["_k"]].drop_duplicates(), on="_k", how="left", indicator=True)
    rejected_index = flagged.loc[flagged["_merge"] == "left_only", "_l"].tolist()
    return out, [left[i] for i in rejected_index]


def join(resources, left_vf: str, right_vf: str, kind: str | None = None, schema: dict | None = None) -> dict:
    spec: dict = {"left": {"virtualFileId": left_vf, "customId": "L", "key": "k"},
                  "right": {"virtualFileId": right_vf, "customId": "R", "key": "key"}}
    if kind:
        spec["type"] = kind
    payload: dict = {"join": spec}
    if schema is not None:
        payload["outputSchema"] = schema
    return invoke("etl.join", payload, resources)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("kind", ["INNER", "LEFT"])
def test_join_matches_pandas_merge(store, resources, seed, kind):
    rng = random.Random(seed)
    left = random_rows(rng, 60, "k", "a")
    right = random_rows(rng, 25, "key", "b")
    default = seed == 1 and kind == "INNER"  # INNER is the default type
    out = join(resources, store.create_from_rows(left), store.create_from_rows(right), None if default else kind)
    want_rows, want_rejected = expected(left, right, kind.lower())
    assert store.rows(out["virtualFileId"]) == want_rows
    assert store.rows(out["rejectionFileId"]) == want_rejected
    assert store.columns(out["virtualFileId"]) == ["k", "a", "name_L", "key", "b", "name_R"]
    matched = sum(1 for r in left if r.get("k") and any(x.get("key") == r["k"] for x in right))
    assert matched + len(want_rejected) == len(left)  # every left row: matched, or rejected once


def test_output_schema_selects_orders_and_renames(store, resources):
    left = store.create_from_rows([{"k": "1", "a": "x", "name": "n1"}, {"k": "2", "a": "y"}, {"a": "z"}])
    right = store.create_from_rows([{"key": "1", "b": "p"}, {"key": "1", "b": "q"}, {"key": "3", "b": "r"}])
    out = join(resources, left, right, "left", {"B": "R.b", "id": "L.k", "A": "L.a"})
    assert store.columns(out["virtualFileId"]) == ["B", "id", "A"]
    assert store.rows(out["virtualFileId"]) == [
        {"B": "p", "id": "1", "A": "x"}, {"B": "q", "id": "1", "A": "x"}, {"id": "2", "A": "y"}, {"A": "z"}]
    assert store.rows(out["rejectionFileId"]) == [{"k": "2", "a": "y"}, {"a": "z"}]


def test_self_join_with_two_custom_ids_and_dotted_columns(store, resources):
    people = store.create_from_rows([{"id": "1", "boss.id": "2", "n": "ann"}, {"id": "2", "n": "bob"}])
    payload = {"join": {"left": {"virtualFileId": people, "customId": "emp", "key": "boss.id"},
                        "right": {"virtualFileId": people, "customId": "boss", "key": "id"}},
               "outputSchema": {"employee": "emp.n", "boss": "boss.n", "boss id": "emp.boss.id"}}
    out = invoke("etl.join", payload, resources)
    assert store.rows(out["virtualFileId"]) == [{"employee": "ann", "boss": "bob", "boss id": "2"}]
    assert store.rows(out["rejectionFileId"]) == [{"id": "2", "n": "bob"}]
    default = invoke("etl.join", {"join": payload["join"]}, resources)
    assert store.columns(default["virtualFileId"]) == ["id_emp", "boss.id_emp", "n_emp", "id_boss", "boss.id_boss",
                                                       "n_boss"]


NFD_CLE = unicodedata.normalize("NFD", "clée")  # as macOS input or a PDF gives it; the file has it composed
NORMALISATION = ("'cle\\u0301e' and the column 'cl\\xe9e' differ only in Unicode normalisation")


@pytest.mark.parametrize(("action", "payload", "message"), [
    ("etl.join", lambda lf, rf: {"join": {"left": {"virtualFileId": lf, "customId": "g", "key": NFD_CLE},
                                        "right": {"virtualFileId": rf, "customId": "d", "key": "k"}}},
     "join.left.key: unknown column 'cl\u0065\u0301e'; g has ['clée', 'prix']; "),
    ("etl.join", lambda lf, rf: {"join": {"left": {"virtualFileId": lf, "customId": "g", "key": "clée"},
                                        "right": {"virtualFileId": rf, "customId": "d", "key": "k"}},
                               "outputSchema": {"x": f"g.{NFD_CLE}"}},
     "outputSchema.x: unknown column 'cl\u0065\u0301e'; 'g' has ['clée', 'prix']; "),
    ("etl.pull", lambda lf, rf: {"virtualFileId": lf, "exportType": "csv", "exportName": "o.csv",
                               "parameters": {"schema": ["prix", NFD_CLE]}},
     "parameters.schema: unknown column 'cl\u0065\u0301e'; the virtual file has ['clée', 'prix']; "),
])
def test_a_column_name_that_differs_only_in_normalisation_is_said_to(store, resources, action, payload, message):
    """"unknown column 'clée'; g has ['clée', …]" read as a contradiction: the two print alike."""
    left = store.create_from_rows([{"clée": "1", "prix": "10"}])
    right = store.create_from_rows([{"k": "1"}])
    with pytest.raises(ConnectorError) as info:
        invoke(action, payload(left, right), resources)
    assert info.value.status == 400
    assert info.value.message.startswith(message + NORMALISATION), info.value.message


@pytest.mark.parametrize(("change", "status", "message"), [
    ({"left": {"virtualFileId": "nope"}}, 404, "not found"),
    ({"right": {"virtualFileId": "nope"}}, 404, "not found"),
    ({"left": {"key": "missing"}}, 400, "join.left.key: unknown column 'missing'"),
    ({"right": {"key": "zzz"}}, 400, "join.right.key: unknown column 'zzz'"),
    ({"schema": {"x": "R.nope"}}, 400, "outputSchema.x: unknown column 'nope'; 'R' has ['key', 'b']"),
    ({"schema": {"x": "Q.b"}}, 400, "outputSchema.x: 'Q.b' must be '<customId>.<column>'"),
    ({"schema": {"x": "b"}}, 400, "outputSchema.x: 'b' must be '<customId>.<column>'"),
    ({"type": "OUTER"}, 400, "join.type: Input should be 'INNER' or 'LEFT'"),
    ({"right": {"customId": "L"}}, 400, "join: left.customId and right.customId must differ"),
    ({"left": {"customId": "a.b"}}, 400, "join.left.customId: must not contain a dot"),
])
def test_errors_create_nothing(store, resources, change, status, message):
    left = store.create_from_rows([{"k": "1", "a": "x"}])
    right = store.create_from_rows([{"key": "1", "b": "y"}])
    spec: dict = {"left": {"virtualFileId": left, "customId": "L", "key": "k"},
                  "right": {"virtualFileId": right, "customId": "R", "key": "key"}}
    for side in ("left", "right"):
        spec[side].update(change.get(side, {}))
    if "type" in change:
        spec["type"] = change["type"]
    payload: dict = {"join": spec}
    if "schema" in change:
        payload["outputSchema"] = change["schema"]
    with store.reading() as conn:
        before = conn.exec_driver_sql("SELECT count(*) FROM cop_virtual_file").scalar()
    with pytest.raises(ConnectorError) as info:
        invoke("etl.join", payload, resources)
    assert info.value.status == status
    assert info.value.message.startswith(message), info.value.message
    with store.reading() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM cop_virtual_file").scalar() == before


def test_joined_files_keep_their_row_key_and_take_appends(resources):
    """On PostgreSQL the new files' primary key is built after their rows (one sorted pass): they end with
    the same constraint as any row table, and appended rows follow in order."""
    from tests.virtual_files import StoreForTests

    store = StoreForTests.of(resources["virtual_files"])
    left = store.create_from_dicts([[{"k": str(i % 7), "a": f"a{i}"} for i in range(50)]])
    right = store.create_from_dicts([[{"key": "3", "b": "b"}]])
    result = join(resources, left, right)
    for vf in (result["virtualFileId"], result["rejectionFileId"]):
        assert store.row_key(vf) in (None, store.ROW_KEY)
        before = store.summary(vf, 100)[2]
        store.append({vf: [{"k": "new"}]})
        assert store.summary(vf, 100)[2] == [*before, {"k": "new"}]
    assert store.summary(result["virtualFileId"], 0)[0] == 7 + 1  # key "3": 7 rows, and the appended one
    assert store.summary(result["rejectionFileId"], 0)[0] == 43 + 1


@pytest.mark.parametrize("load", ["rows", "copy"])
def test_join_inputs_get_statistics_on_postgresql(postgres_resources, load):
    """Files fresh from a load have no planner statistics; Join gathers them first (without them the
    planner sorted the whole left file for a merge join instead of hashing the right one). A ``COPY`` load
    builds the primary key after the rows, which tells the planner the table's size but not its columns'
    values: statistics are judged by the columns' (``pg_stats``), not by the size."""
    resources = postgres_resources
    store = resources["virtual_files"]
    left_rows = [{"k": str(i % 7), "a": f"a{i}"} for i in range(500)]
    if load == "rows":
        left = store.create_from_dicts([left_rows])
    else:
        data = "".join(f"{r['k']},{r['a']}\n" for r in left_rows).encode()
        left = store.create_from_csv(["k", "a"], io.BytesIO(data), ",")
    right = store.create_from_dicts([[{"key": "3", "b": "b"}]])

    with store.sql.writing() as conn:  # autovacuum must not get there first
        names = [store.sql.info(conn, vf).table_name for vf in (left, right)]
        for name in names:
            conn.exec_driver_sql(f'ALTER TABLE "{name}" SET (autovacuum_enabled = false)')

    def state() -> list[tuple[float, int]]:
        with store.sql.reading() as conn:
            return [conn.exec_driver_sql(f"SELECT reltuples, (SELECT count(*) FROM pg_stats WHERE tablename = '{n}') "
                                         f"FROM pg_class WHERE relname = '{n}'").one() for n in names]

    before = state()
    assert [columns for _, columns in before] == [0, 0]  # no column statistics
    assert before[0][0] == (-1 if load == "rows" else 500)  # -1: never analyzed (PostgreSQL ≥ 14)
    join(resources, left, right)
    assert state() == [(500, 3), (1, 3)]  # seq and the two columns


def test_rejection_is_an_anti_join_on_postgresql(postgres_url, tmp_path):
    """The rejection file's rows come from an anti-join, never a subplan run per left row: with the right
    file's keys larger than work_mem, that subplan scanned the whole right file once per left row (a 4M ×
    400k Join did not end in 5 minutes). The statement the Join ran is explained on the same tables."""
    import sqlalchemy as sa

    from tests.conftest import resources_on

    resources = resources_on(postgres_url, tmp_path / "home", options="-cwork_mem=64kB")
    store = resources["virtual_files"]
    left = store.create_from_dicts([[{"k": str(i), "a": "x"} for i in range(0, 6000, 3)] + [{"k": ""}, {"a": "y"}]])
    right = store.create_from_dicts([[{"key": str(i), "b": "b"} for i in range(5000)]])
    statements: list[tuple[str, object]] = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        statements.append((statement, parameters))

    sa.event.listen(store.sql.engine, "before_cursor_execute", seen)
    try:
        result = join(resources, left, right)
    finally:
        sa.event.remove(store.sql.engine, "before_cursor_execute", seen)
    rejecting = [(s, p) for s, p in statements if s.startswith("CREATE TABLE") and "EXISTS" in s]
    assert len(rejecting) == 1
    statement, parameters = rejecting[0]
    with store.sql.reading() as conn:
        assert conn.exec_driver_sql("SHOW work_mem").scalar() == "64kB"
        plan = "\n".join(conn.exec_driver_sql("EXPLAIN " + statement.split(" AS ", 1)[1], parameters).scalars())
    assert "Anti Join" in plan and "SubPlan" not in plan, plan
    rejected = store.summary(result["rejectionFileId"], 0)[0]
    assert rejected == 2000 - 1667 + 2  # keys ≥ 5000 and the two rows without a key


def test_output_order_holds_when_row_keys_are_huge_on_postgresql(postgres_resources):
    """The output's ``seq`` is ``l.seq × (largest right seq + 1) + r.seq`` where that fits in ``bigint``;
    files whose row keys have grown past that number their output rows instead, in the same order."""
    from tests.virtual_files import StoreForTests

    resources = postgres_resources
    store = StoreForTests.of(resources["virtual_files"])
    left = store.create_from_dicts([[{"k": "1", "a": "first"}]])
    right = store.create_from_dicts([[{"key": "1", "b": "r1"}]])
    for vf in (left, right):  # as after 2³² appended rows
        with store.sql.writing() as conn:
            table = store.info(conn, vf).table_name
            conn.exec_driver_sql(f"SELECT setval(pg_get_serial_sequence('\"{table}\"', 'seq'), {2 ** 32})")
    store.append({left: [{"k": "2", "a": "second"}, {"k": "1", "a": "third"}]})
    store.append({right: [{"key": "2", "b": "r2"}, {"key": "1", "b": "r3"}]})
    result = join(resources, left, right)
    assert [(r["a"], r["b"]) for r in store.rows(result["virtualFileId"])] == [
        ("first", "r1"), ("first", "r3"), ("second", "r2"), ("third", "r1"), ("third", "r3")]
    store.append({result["virtualFileId"]: [{"a": "new"}]})
    assert store.rows(result["virtualFileId"])[-1] == {"a": "new"}
