"""The store's SQL jobs on one database, composed: what :class:`~.store.VirtualFileStore` delegates to."""

from __future__ import annotations

from functools import lru_cache

from connector_ops.resources.virtual_files.arrow_loads import ArrowLoading
from connector_ops.resources.virtual_files.reading import Reading
from connector_ops.resources.virtual_files.transforms import Transforms


class SqlStore(ArrowLoading, Transforms, Reading):
    """Writing, reading, querying and transforms over SQLAlchemy Core on the database at ``database_url``."""


@lru_cache(maxsize=64)
def sql_store(database_url: str, min_free_disk: int) -> SqlStore:
    """One per URL and floor per process (it holds nothing else; the engine is cached by URL)."""
    return SqlStore(database_url=database_url, min_free_disk=min_free_disk)
