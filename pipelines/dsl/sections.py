"""What the parsers of a pipeline's optional sections (``retry``, ``check``, ``notify``, ``asset``) share:
how they report a problem, and the first check of a section — a mapping with known keys only."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: report(path, message): one problem, located by its path in the document
Report = Callable[[Sequence[str | int], str], None]


def known_mapping(raw: Any, path: tuple[str | int, ...], section: str, keys: Sequence[str], shape: str,
                  report: Report) -> bool | None:
    """``None`` when ``raw`` is not a mapping (reported with ``shape``, what it should look like); else whether
    all its keys are among ``keys`` (each unknown one reported)."""
    if not isinstance(raw, Mapping):
        report(path, shape)
        return None
    ok = True
    for key in raw:
        if key not in keys:
            report((*path, key), f"unknown key {key!r} in {section}; allowed: {', '.join(keys)}")
            ok = False
    return ok


def whole_number(value: Any) -> int | None:
    """``value`` as an ``int`` when it is a whole number: an integer, or a float without a fraction (YAML's
    ``1.0``), which an action's integer input takes (pydantic) and the editor schema's ``"type": "integer"``
    cannot tell from 1; else ``None`` (``1.5``, ``true``, NaN, an infinity, text)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, float) and value.is_integer() else None
