"""Validate over columns: each rule evaluated once per value with Arrow compute, per page of rows.

The vectors only say which rows *may* fail; those rows (and only those) then go through the row checks of
:mod:`.validation`, which decide and word the error exactly as before. So a row Arrow lets through is one
the row checks would accept too: every vector here is exact on ASCII text and flags anything else (RE2's
``[0-9]`` is narrower than Python's ``\\d``, a boolean must spell ``true``/``false`` in ASCII letters).
Accepted rows — usually most of them — never become Python dicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class ColumnRule(Protocol):
    """What this module reads of :class:`connector_ops.etl.validation.ColumnRule`."""

    column: str
    required: bool
    allow_empty: bool
    kind: str
    low: int | None
    high: int | None
    precision: tuple[int, int] | None

_INTEGER = r"^[+-]?[0-9]+$"
_FLOAT = r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$"
_BOOLEAN = r"^(?:[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee])$"


def suspects(rules: Sequence[ColumnRule], names: Sequence[str], page: list[tuple]) -> list[int]:
    """The positions in ``page`` (value tuples aligned with ``names``) of the rows that may break a rule."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not page:
        return []
    columns = list(zip(*page, strict=True)) if names else []
    index = {name: i for i, name in enumerate(names)}
    flagged = None
    for rule in rules:
        at = index.get(rule.column)
        if at is None:  # a column the file does not have: missing in every row
            if rule.required:
                return list(range(len(page)))
            continue
        fails = _may_fail(rule, pa.array(columns[at], pa.string()))
        flagged = fails if flagged is None else pc.or_(flagged, fails)
    return [] if flagged is None else pc.indices_nonzero(flagged).to_pylist()


def _may_fail(rule: ColumnRule, values: Any) -> Any:
    """True where the value may break the rule (False for a missing or allowed-empty value unless required)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    absent = pc.is_null(values)
    if not rule.allow_empty:
        absent = pc.or_(absent, pc.fill_null(pc.equal(values, ""), False))
    checked = pc.fill_null(_check(rule, values), True)
    return pc.if_else(absent, pa.scalar(rule.required), checked)


def _check(rule: ColumnRule, values: Any) -> Any:
    import pyarrow.compute as pc

    if rule.kind == "boolean":
        return pc.invert(pc.match_substring_regex(values, _BOOLEAN))
    if rule.kind == "string":
        return _outside(pc.utf8_length(values), rule.low, rule.high)
    if rule.kind == "integer":
        digits = pc.max_element_wise(pc.utf8_length(pc.utf8_ltrim(pc.utf8_ltrim(values, "+-"), "0")), 1)
        return pc.or_(pc.invert(pc.match_substring_regex(values, _INTEGER)), _outside(digits, rule.low, rule.high))
    whole = pc.utf8_length(pc.replace_substring_regex(values, r"^[+-]?0*([0-9]*)(?:\.[0-9]*)?$", r"\1"))
    fraction = pc.utf8_length(pc.replace_substring_regex(values, r"^[+-]?[0-9]*(?:\.([0-9]*?)0*)?$", r"\1"))
    malformed = pc.invert(pc.match_substring_regex(values, _FLOAT))
    if rule.precision is not None:
        p, s = rule.precision
        return pc.or_(malformed, pc.or_(pc.greater(whole, p - s), pc.greater(fraction, s)))
    return pc.or_(malformed, _outside(pc.max_element_wise(pc.add(whole, fraction), 1), rule.low, rule.high))


def _outside(lengths: Any, low: int | None, high: int | None) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    out = pc.equal(lengths, -1)  # all False (null stays null)
    if low is not None:
        out = pc.or_(out, pc.less(lengths, low))
    if high is not None:
        out = pc.or_(out, pc.greater(lengths, high))
    return out if len(lengths) else pa.array([], pa.bool_())
