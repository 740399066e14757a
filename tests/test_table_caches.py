"""A process's caches of row tables (compiled statements, ``Table`` objects) let go of a table when the store
drops it, and are LRUs: a long-lived process that ran many pipelines held ~180 MiB of statements for tables
that no longer existed. SQLAlchemy's own compiled cache is an LRU of its own, left to itself (pruning it
raced with the threads using it)."""

from __future__ import annotations

from typing import Any

from connector_ops import invoke
from connector_ops.resources.virtual_files import catalog, fetching
from connector_ops.resources.virtual_files.table_caches import TableCache


def _table_of(store: Any, vf_id: str) -> str:
    with store.reading() as conn:
        return store.info(conn, vf_id).table_name


def _cached_for(store: Any, table_name: str) -> dict[str, int]:
    """What this process's caches still hold for ``table_name``: statements compiled over it, and the
    ``Table`` describing it."""
    return {"compiled": sum(table_name in v.string for v in list(fetching._COMPILED.values())),
            "tables": sum(t.name == table_name for t in catalog._row_table.values())}


def _use(vf_id: str, resources: dict[str, Any]) -> None:
    invoke("etl.query", {"virtualFileId": vf_id, "query": {"a": {"$in": ["1", "2"]}, "b": "x"}}, resources)
    invoke("etl.query", {"virtualFileId": vf_id, "query": {"a": "1"}}, resources)
    invoke("etl.iterate", {"content": vf_id, "maxBatchSize": 1}, resources)
    invoke("etl.delete_rows", {"virtualFileId": vf_id, "request": {"a": "none"}}, resources)


def test_a_dropped_files_cached_statements_go_with_its_table(store, resources):
    """Clean, a Map over itself (the file's table replaced) and publishing a named file over another drop a
    table: what the process cached for it goes in the same call, on both databases."""
    rows = [{"a": "1", "b": "x"}, {"a": "2", "b": "y"}]
    cleaned, mapped, named = (store.create_from_rows(rows) for _ in range(3))
    tables = {vf: _table_of(store, vf) for vf in (cleaned, mapped, named)}
    for vf in tables:
        _use(vf, resources)
        cached = _cached_for(store, tables[vf])
        assert cached["compiled"] and cached["tables"], cached
    invoke("etl.clean", {"virtualFileId": cleaned}, resources)
    invoke("etl.map", {"virtualFileId": mapped, "action": "upper(b)", "overwriteVirtualFile": True}, resources)
    resources["virtual_files"].publish(named, store.create_from_rows(rows))
    for vf, table in tables.items():
        assert _cached_for(store, table) == {"compiled": 0, "tables": 0}, vf
    _use(mapped, resources)  # the files that remain are read as before
    assert invoke("etl.query", {"virtualFileId": named, "query": {"a": "2"}}, resources) == {
        "result": [{"a": "2", "b": "y"}]}


def test_a_full_cache_lets_go_of_its_least_recently_used_entry():
    """The compiled-statement cache was cleared all at once when full, compiling every live statement again."""
    cache: TableCache[int, str] = TableCache(3)
    for key in range(3):
        cache.put(key, f"v{key}", (f"t{key}",))
    assert cache.get(0) == "v0"  # used: 1 is now the least recently used
    cache.put(3, "v3", ("t3",))
    assert [k for k in range(4) if k in cache] == [0, 2, 3]
    cache.forget("t2")
    assert [k for k in range(4) if k in cache] == [0, 3] and len(cache) == 2
