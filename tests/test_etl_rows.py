"""Iterate, Query, Append Rows and Clean on both databases: values, batching rules, errors."""

from __future__ import annotations

import contextlib

import pytest

from connector_ops import ConnectorError, invoke


def push(files, text: str) -> str:
    pf = files.add_bytes(text.encode(), "data.csv").to_json()
    return invoke("etl.push", {"platformFile": pf})["virtualFileId"]


def numbers(files, n: int) -> str:
    return push(files, "n,parity\n" + "".join(f"{i},{'even' if i % 2 == 0 else 'odd'}\n" for i in range(n)))


def error(name: str, payload: dict) -> ConnectorError:
    with pytest.raises(ConnectorError) as info:
        invoke(name, payload)
    return info.value


def test_iterate_batches_continue_and_restart_after_the_end(files, env):
    vf = numbers(files, 7)
    seen = []
    for expected_next in (True, True, False):
        page = invoke("etl.iterate", {"content": vf, "maxBatchSize": 3})
        seen.append([r["n"] for r in page["content"]])
        assert page["hasNext"] is expected_next
    assert seen == [["0", "1", "2"], ["3", "4", "5"], ["6"]]
    again = invoke("etl.iterate", {"content": vf, "maxBatchSize": 3})  # after hasNext=false it starts over
    assert [r["n"] for r in again["content"]] == ["0", "1", "2"]


def test_iterate_exact_multiple_reports_no_next_on_the_last_full_batch(files, env):
    vf = numbers(files, 4)
    first = invoke("etl.iterate", {"content": vf, "maxBatchSize": 2})
    second = invoke("etl.iterate", {"content": vf, "maxBatchSize": 2})
    assert first["hasNext"] is True and second["hasNext"] is False
    assert [r["n"] for r in second["content"]] == ["2", "3"]


def test_iterate_sees_appended_rows_and_skips_deleted(files, env, store):
    vf = numbers(files, 3)
    assert [r["n"] for r in invoke("etl.iterate", {"content": vf, "maxBatchSize": 2})["content"]] == ["0", "1"]
    invoke("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"n": "3", "extra": "x"}}]})
    page = invoke("etl.iterate", {"content": vf, "maxBatchSize": 5})
    assert page == {"content": [{"n": "2", "parity": "even"}, {"n": "3", "extra": "x"}], "hasNext": False}


def test_iterate_sees_rows_appended_after_the_last_rows_were_deleted(files, env):
    """A row's ``seq`` is never handed out twice in a file: on SQLite it is the rowid, which numbered new rows
    after the largest left, so rows appended after a Delete Rows took the file's last rows got the numbers
    taken, at or below a running Iterate's position, and that Iterate never returned them (PostgreSQL's
    sequence never reuses a number)."""
    def iterate(vf: str, size: int) -> tuple[list[str], bool]:
        page = invoke("etl.iterate", {"content": vf, "maxBatchSize": size})
        return [r["n"] for r in page["content"]], page["hasNext"]

    def append(vf: str, *values: str) -> None:
        invoke("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"n": v}} for v in values]})

    vf = numbers(files, 5)  # 0 … 4
    assert iterate(vf, 3) == (["0", "1", "2"], True)
    invoke("etl.delete_rows", {"virtualFileId": vf, "request": {"n": {"$in": ["2", "3", "4"]}}})
    append(vf, "new-A", "new-B")
    assert iterate(vf, 3) == (["new-A", "new-B"], False)

    vf = numbers(files, 5)  # the file emptied while it is iterated, twice before the next append
    assert iterate(vf, 3) == (["0", "1", "2"], True)
    invoke("etl.delete_rows", {"virtualFileId": vf, "request": {}})
    append(vf, "gone")
    invoke("etl.delete_rows", {"virtualFileId": vf, "request": {}})  # below the floor the first delete noted
    invoke("etl.delete_rows", {"virtualFileId": vf, "request": {}})  # nothing left: the floor stays
    append(vf, "new-A", "new-B", "new-C")
    assert iterate(vf, 10) == (["new-A", "new-B", "new-C"], False)
    assert iterate(vf, 2) == (["new-A", "new-B"], True)  # after the end it starts over, on the rows there are


def test_iterate_empty_file_and_array_content(files, env):
    vf = push(files, "a\n")
    assert invoke("etl.iterate", {"content": vf, "maxBatchSize": 10}) == {"content": [], "hasNext": False}
    items = [1, "two", {"three": 3}, [4], None]
    first = invoke("etl.iterate", {"content": items, "maxBatchSize": 2})
    second = invoke("etl.iterate", {"content": items, "maxBatchSize": 2})
    third = invoke("etl.iterate", {"content": items, "maxBatchSize": 2})
    assert (first, second, third) == (
        {"content": [1, "two"], "hasNext": True},
        {"content": [{"three": 3}, [4]], "hasNext": True},
        {"content": [None], "hasNext": False},
    )
    assert invoke("etl.iterate", {"content": items, "maxBatchSize": 10}) == {"content": items, "hasNext": False}
    assert invoke("etl.iterate", {"content": [], "maxBatchSize": 1}) == {"content": [], "hasNext": False}


def test_iterate_across_many_batches_returns_every_row_once(files, env):
    vf = numbers(files, 2_345)
    seen, has_next = [], True
    while has_next:
        page = invoke("etl.iterate", {"content": vf, "maxBatchSize": 1_000})
        assert len(page["content"]) <= 1_000
        seen += [int(r["n"]) for r in page["content"]]
        has_next = page["hasNext"]
    assert seen == list(range(2_345))


def test_iterate_errors(env):
    assert (error("etl.iterate", {"content": "nope", "maxBatchSize": 1}).status,
            error("etl.iterate", {"content": "nope", "maxBatchSize": 1}).body) == (404, {"message": "not found"})
    assert error("etl.iterate", {"content": "x", "maxBatchSize": 0}).body["message"].startswith("maxBatchSize")
    assert error("etl.iterate", {"maxBatchSize": 3}).body["message"].startswith("content")
    assert error("etl.iterate", {"content": 5, "maxBatchSize": 3}).status == 400


def test_query_equality_order_and_only_one(files, env, store):
    vf = push(files, "city,name\nParis,a\nRome,b\nParis,c\nparis,d\n")
    assert invoke("etl.query", {"virtualFileId": vf, "query": {"city": "Paris"}}) == {
        "result": [{"city": "Paris", "name": "a"}, {"city": "Paris", "name": "c"}]
    }
    assert invoke("etl.query", {"virtualFileId": vf, "query": {"city": "Paris"}, "extractOnlyOneResult": True}) == {
        "result": [{"city": "Paris", "name": "a"}]
    }
    assert invoke("etl.query", {"virtualFileId": vf, "query": {"city": "Paris", "name": "c"}})["result"] == [
        {"city": "Paris", "name": "c"}
    ]
    assert invoke("etl.query", {"virtualFileId": vf, "query": {"nope": "x"}}) == {"result": []}
    assert invoke("etl.query", {"virtualFileId": vf, "query": {"city": "x' OR '1'='1"}}) == {"result": []}
    assert len(invoke("etl.query", {"virtualFileId": vf, "query": {}})["result"]) == 4


def test_query_creates_an_index_once(files, env, store):
    vf = push(files, "city\nParis\n")
    invoke("etl.query", {"virtualFileId": vf, "query": {"city": "Paris"}})
    with store.reading() as conn:
        info = store.info(conn, vf)
        assert info.indexed == {0}
        import sqlalchemy as sa

        names = {ix["name"] for ix in sa.inspect(conn).get_indexes(info.table_name)}
    assert any(name.endswith("_c0") for name in names)


def test_query_errors(env):
    exc = error("etl.query", {"virtualFileId": "nope", "query": {}})
    assert exc.status == 500 and "not found" in exc.body["message"]
    assert error("etl.query", {"query": {}}).body["message"].startswith("virtualFileId")
    assert error("etl.query", {"virtualFileId": "x"}).body["message"].startswith("query")


def test_append_rows_to_several_files_in_one_transaction(files, env):
    a, b = push(files, "x\n1\n"), push(files, "y\n1\n")
    assert invoke("etl.append_rows", {"rows": [
        {"virtualFileId": a, "content": {"x": "2"}},
        {"virtualFileId": b, "content": {"y": "2", "z": "new"}},
        {"virtualFileId": a, "content": {"x": 3, "flag": True}},
    ]}) == "ok"
    assert invoke("etl.iterate", {"content": a, "maxBatchSize": 10})["content"] == [
        {"x": "1"}, {"x": "2"}, {"x": "3", "flag": "true"}]
    assert invoke("etl.iterate", {"content": b, "maxBatchSize": 10})["content"] == [{"y": "1"}, {"y": "2", "z": "new"}]


def test_append_rows_failure_changes_nothing(files, env, store):
    a = push(files, "x\n1\n")
    exc = error("etl.append_rows", {"rows": [
        {"virtualFileId": a, "content": {"x": "2", "new": "col"}},
        {"virtualFileId": "missing", "content": {"x": "3"}},
    ]})
    assert (exc.status, exc.body) == (500, {"message": "virtual file 'missing' not found"})
    assert invoke("etl.iterate", {"content": a, "maxBatchSize": 10})["content"] == [{"x": "1"}]
    assert store.columns(a) == ["x"]  # the column the first item added is gone with it
    pulled = invoke("etl.pull", {"virtualFileId": a, "exportType": "csv", "exportName": "a.csv"})["platformFile"]
    assert (pulled["name"], pulled["contentType"], pulled["size"]) == ("a.csv", "text/csv", 6)
    assert files.read_bytes(pulled) == b"x\r\n1\r\n"


def test_append_rows_bad_input(env):
    assert error("etl.append_rows", {}).body["message"].startswith("rows")
    msg = error("etl.append_rows", {"rows": [{"virtualFileId": "a"}]}).body["message"]
    assert msg.startswith("rows[0].content")
    assert invoke("etl.append_rows", {"rows": []}) == "ok"


def test_clean_frees_storage_and_errors_are_null(files, env, store):
    vf = push(files, "a\n1\n")
    with store.reading() as conn:
        table = store.info(conn, vf).table_name
    assert invoke("etl.clean", {"virtualFileId": vf}) is None
    import sqlalchemy as sa

    with store.reading() as conn:
        assert table not in sa.inspect(conn).get_table_names()
    exc = error("etl.clean", {"virtualFileId": vf})
    assert (exc.status, exc.body) == (500, None)
    assert error("etl.iterate", {"content": vf, "maxBatchSize": 1}).status == 404
    assert error("etl.clean", {}).status == 400


@pytest.mark.parametrize("value", ["plain", "", "a\\b", "\\N", "x\ty", "two\nlines", "cr\rhere", "ünï 🙂"])
def test_values_survive_every_bulk_load_path(files, env, value):
    """PostgreSQL loads plain batches as COPY text and the rest as binary rows; both must be exact."""
    vf = push(files, "a,b\nfirst,1\n")
    invoke("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"a": value, "b": "2"}},
                                        {"virtualFileId": vf, "content": {"a": "third"}}]})
    assert invoke("etl.iterate", {"content": vf, "maxBatchSize": 10})["content"] == [
        {"a": "first", "b": "1"}, {"a": value, "b": "2"}, {"a": "third"}]


def test_a_bad_setting_of_another_connector_does_not_break_etl(env, monkeypatch):
    monkeypatch.setenv("CONNECTOR_OPS_MAIL_BACKEND", "mailjett")
    assert invoke("etl.iterate", {"content": [1, 2], "maxBatchSize": 1}) == {"content": [1], "hasNext": True}
    exc = error("mail.send_transactional_message", {})
    assert exc.status == 500
    assert exc.body["message"].startswith("configuration error: CONNECTOR_OPS_MAIL_BACKEND: must be one of")


def test_fan_out_batches_refuse_a_replaced_file(files, env, store):
    from connector_ops.kernel.errors import NotFound
    from connector_ops.ops.fanout import plan_batches, read_batch

    vf = numbers(files, 5)
    batches = plan_batches(store, vf, 2)
    assert [b["uptoSeq"] - b["afterSeq"] for b in batches] == [2, 2, 1]
    assert [r["n"] for r in read_batch(store, batches[1])] == ["2", "3"]
    with store.create(["n"], replace=vf) as writer:
        writer.write_tuples(["n"], [["x"], ["y"], ["z"]])
    with pytest.raises(NotFound, match="replaced"):
        read_batch(store, batches[1])


def test_an_index_build_sorts_in_bounded_memory_on_sqlite(tmp_path):
    """SQLite sizes a sort's memory by the connection's cache: an index is built under the smaller cache,
    and the connection gets its full cache back afterwards (repeated Queries read their pages from it)."""
    import sqlalchemy as sa

    from connector_ops.resources.virtual_files.engines import SQLITE_CACHE_KIB, SQLITE_SORT_KIB, sized_kib
    from connector_ops.resources.virtual_files.store import VirtualFileStore

    store = VirtualFileStore(database_url=f"sqlite:///{tmp_path / 'vf.db'}")
    vf = store.create_from_batches(["city"], [[("Paris",), ("Lyon",)]])
    engine = store.sql.engine
    during: list[int] = []

    def watch(_conn, cursor, statement, *_args) -> None:
        if statement.startswith("CREATE INDEX"):
            during.append(cursor.connection.execute("PRAGMA cache_size").fetchone()[0])

    sa.event.listen(engine, "before_cursor_execute", watch)
    try:
        assert store.find(vf, {"city": "Lyon"}) == [{"city": "Lyon"}]
    finally:
        sa.event.remove(engine, "before_cursor_execute", watch)
    assert during == [-sized_kib(SQLITE_SORT_KIB)]
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == -sized_kib(SQLITE_CACHE_KIB)


def test_a_new_file_is_filled_under_a_small_page_cache_on_sqlite(tmp_path):
    """The pages a load writes stay in SQLite's cache, dirty, until it is full: a new file is filled under
    the small cache, and the connection gets its full cache back afterwards, after a failed load too."""
    from connector_ops.resources.virtual_files.engines import SQLITE_CACHE_KIB, SQLITE_LOAD_KIB, sized_kib
    from connector_ops.resources.virtual_files.store import VirtualFileStore

    store = VirtualFileStore(database_url=f"sqlite:///{tmp_path / 'vf.db'}")
    for fails in (False, True):
        with pytest.raises(RuntimeError) if fails else contextlib.nullcontext(), \
                store.sql.create(["city"]) as writer:
            writer.write_tuples(["city"], [("Paris",)])
            assert writer.conn.exec_driver_sql("PRAGMA cache_size").scalar() == -sized_kib(SQLITE_LOAD_KIB)
            if fails:
                raise RuntimeError("the source failed")
        with store.sql.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == -sized_kib(SQLITE_CACHE_KIB)
    assert len(store.inventory()) == 1


def test_a_reader_does_not_wait_for_its_commit_to_be_flushed_on_postgresql(postgres_resources):
    """A reader's ``FOR SHARE`` on the catalog gives it a transaction id, so its commit waited for the
    write-ahead log's flush (a third of a Query here). Its lookup turns ``synchronous_commit`` off for that
    transaction alone; a writer, reading its sources or locking its file, keeps it on."""
    store = postgres_resources["virtual_files"]
    vf = store.create_from_dicts([[{"n": "a"}, {"n": "b"}]])

    def setting(conn) -> str:
        return conn.exec_driver_sql("SHOW synchronous_commit").scalar_one()

    with store.sql.reading() as conn:
        assert setting(conn) == "on"
        store.sql.info(conn, vf)
        assert setting(conn) == "off"
        held = conn.exec_driver_sql("SELECT txid_current_if_assigned()").scalar_one()
        assert held is not None  # the share lock is still taken (it is what gives the reader an id)
    with store.sql.writing() as conn:
        store.sql.info(conn, vf)
        store.sql.info(conn, vf, lock=True)
        assert setting(conn) == "on"
    with store.sql.reading() as conn:
        assert setting(conn) == "on"  # only for the transaction that looked up
    assert store.find(vf, {"n": "b"}) == [{"n": "b"}]


@pytest.mark.parametrize("seed", range(5))
def test_pages_become_the_same_dicts_whichever_way_they_are_built(seed):
    """``as_dicts`` builds a page without missing or empty values in one go, and any other page row by row:
    both ways give what ``row_of`` gives each row (a missing value left out, an empty one kept, a trailing
    ``seq`` cut off)."""
    import random

    from connector_ops.resources.virtual_files.rows import as_dicts, row_of

    rng = random.Random(seed)
    names = ["a", "b", "c"]
    for _ in range(50):
        choices = ["x", "é", "0"] + ([None, ""] if rng.random() < 0.5 else [])
        page = [(*(rng.choice(choices) for _ in names), seq) for seq in range(1, rng.randint(1, 20))]
        assert as_dicts(names, page) == [row_of(names, row) for row in page]
        assert as_dicts(names, [row[:-1] for row in page]) == [row_of(names, row[:-1]) for row in page]
    mixed = [("x", None, "", 1), ("x", "y", "z", 2)]
    assert as_dicts(names, mixed) == [{"a": "x", "c": ""}, {"a": "x", "b": "y", "c": "z"}]
