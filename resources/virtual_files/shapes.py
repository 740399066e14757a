"""The shapes the store's callers use (rows, join sides, the callbacks of Map and Validate), kept in a module
that imports nothing heavy, so an action module can name them without loading SQLAlchemy."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

#: a row as callers see it: column name -> value; a missing value is left out
Row = dict[str, str]
#: a stored row's values aligned with the file's columns; None is a missing value
Values = Sequence[str | None]
#: rows per page when the store streams a file
SCAN_BATCH = 10_000

JoinKind = Literal["INNER", "LEFT"]
#: a page of rows -> the rows to write (dicts of text or None; a new key adds a column); a sequence, not any
#: iterable: the writer reads the page more than once and slices it
PageFunction = Callable[[list[Row]], Sequence[Mapping[str, str | None]]]
#: a row -> None to accept it, or the values of its row in the refused file
Refusal = Callable[[Row], Sequence[str] | None]


class RuleShape(Protocol):
    """A Validate column rule as the store reads it to clear rows in SQL (:mod:`.suspect_sql`);
    :class:`connector_ops.etl.validation.ColumnRule` is one. Read-only properties: the store only reads
    them, and a frozen dataclass (ColumnRule) matches a protocol's plain attributes only if they are settable."""

    @property
    def column(self) -> str: ...
    @property
    def required(self) -> bool: ...
    @property
    def allow_empty(self) -> bool: ...
    @property
    def kind(self) -> str: ...  # string | integer | float | boolean
    @property
    def low(self) -> int | None: ...
    @property
    def high(self) -> int | None: ...
    @property
    def precision(self) -> tuple[int, int] | None: ...
    @property
    def spec(self) -> str: ...  # a float's "p,s" maxLength as the errors show it


@dataclass(frozen=True)
class Verdicts:
    """What the database needs to decide Validate's rows itself: the column rules and the words of each
    problem (templates over ``{value}``, ``{length}``, …: ``connector_ops.etl.validation.WORDING``); the
    refused file's columns are ``error`` and ``content`` (the row as JSON)."""

    rules: Sequence[RuleShape]
    wording: Mapping[str, str]


@dataclass(frozen=True)
class Side:
    """One side of a join: a virtual file, the id naming it in ``outputSchema``, and its key column."""

    virtual_file_id: str
    custom_id: str
    key: str
