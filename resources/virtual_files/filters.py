"""Query filters over a virtual file's columns, compiled to SQLAlchemy expressions.

The Query action gives ``{column: value}`` (equality on every given column). Column names are looked
up in the catalog's column map, so a name is only ever data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from connector_ops.errors import InvalidInput


def compile_filter(flt: Mapping[str, Any], columns: Mapping[str, sa.ColumnElement], *, field: str = "query",
                   dialect: str = "sqlite") -> sa.ColumnElement[bool]:
    """Equality on every key of ``flt``; a column the virtual file does not have matches nothing."""
    clauses: list[sa.ColumnElement[bool]] = []
    for name, value in flt.items():
        if not isinstance(value, str):
            raise InvalidInput(f"{field}.{name}", f"must be a string, got {type(value).__name__}")
        column = columns.get(name)
        clauses.append(sa.false() if column is None else column == value)
    return sa.and_(sa.true(), *clauses)


def equality_columns(flt: Mapping[str, Any]) -> list[str]:
    """The columns an index would serve (top-level equality), in the filter's order."""
    return [name for name, value in flt.items() if isinstance(value, str)]
