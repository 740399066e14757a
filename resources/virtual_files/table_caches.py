"""Caches of things built for one row table (its ``Table``, statements compiled over it, what its role may
not do), emptied of a table's entries when the store drops that table.

Every virtual file has a table name of its own, never reused, so once a file is dropped (Clean, a Map in
place, an asset published anew, ``connector-ops gc``) whatever a process cached for its table is dead. Caches
that kept them until a size cap (and then cleared everything at once) held ~180 MiB in a process that had run
a few hundred pipelines. Each cache here is an LRU bounded by its size, and :func:`forget_tables` removes a
dropped table's entries from all of them (SQLAlchemy's own compiled-statement cache is an LRU of its own).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

import sqlalchemy as sa

K = TypeVar("K")
V = TypeVar("V")

#: every cache made, so that :func:`forget_tables` reaches them all
_CACHES: weakref.WeakSet[TableCache[Any, Any]] = weakref.WeakSet()


class TableCache(Generic[K, V]):
    """An LRU of at most ``size`` entries, each filed under the row tables it was built for."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[K, tuple[V, frozenset[str]]] = OrderedDict()
        self._by_table: dict[str, set[K]] = {}
        self._lock = threading.Lock()
        _CACHES.add(self)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: K) -> bool:
        return self.get(key) is not None

    def values(self) -> list[V]:
        with self._lock:
            return [value for value, _ in self._entries.values()]

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: K, value: V, tables: Iterable[str]) -> V:
        """Keep ``value`` (built for ``tables``); the least recently used entry goes past ``size``."""
        names = frozenset(tables)
        with self._lock:
            self._discard(key)
            self._entries[key] = (value, names)
            for name in names:
                self._by_table.setdefault(name, set()).add(key)
            while len(self._entries) > self.size:
                self._discard(next(iter(self._entries)))
        return value

    def get_or_build(self, key: K, build: Callable[[], V], tables: Iterable[str]) -> V:
        found = self.get(key)
        return self.put(key, build(), tables) if found is None else found

    def forget(self, table_name: str) -> None:
        with self._lock:
            for key in list(self._by_table.get(table_name, ())):
                self._discard(key)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._by_table.clear()

    def _discard(self, key: K) -> None:
        found = self._entries.pop(key, None)
        if found is None:
            return
        for name in found[1]:
            keys = self._by_table.get(name)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_table[name]


def forget_tables(table_names: Iterable[str]) -> None:
    """Remove what this process cached for ``table_names``, which a transaction drops. Should it roll back,
    the tables are simply built and compiled again when next used. SQLAlchemy's own cache of compiled
    statements is left to its LRU (500 statements): walking it here raced with the threads that use it."""
    for cache in list(_CACHES):
        for name in table_names:
            cache.forget(name)


def drop_row_table(conn: sa.Connection, table: sa.Table) -> None:
    """Drop a virtual file's row table (or a work table of the store's) in ``conn``'s transaction, and this
    process's caches of it. A ``$regex``'s matches on PostgreSQL (``ON COMMIT DROP``) are not dropped here:
    their statements age out of the LRU."""
    table.drop(conn)
    forget_tables([table.name])
