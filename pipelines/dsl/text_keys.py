"""Keys a step's input holds that are no text: YAML reads ``1:``, ``true:``, ``~:`` as a number, a boolean, null.

An action's input is JSON, whose keys are text; the input model refuses any other key, but in its own terms
(``templateVariables.str: Input should be a valid string``, naming a branch of a union, or ``query[1].[key]``).
The validator says it once, naming the key as written, and checks the rest of the input with the keys as text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

Location = tuple[str | int, ...]


def written(key: Any) -> str:
    """``key`` as YAML wrote it (``1``, ``true``, ``null``), near enough to quote it back."""
    try:
        return json.dumps(key)
    except (TypeError, ValueError):
        return str(key)


def non_text_keys(value: Any, location: Location = ()) -> Iterator[tuple[Location, Any]]:
    """``(location of the mapping, key)`` for every key of a mapping inside ``value`` that is not text."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                yield location, key
            yield from non_text_keys(item, (*location, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from non_text_keys(item, (*location, i))


def key_problem(key: Any) -> str:
    """Why ``key`` is refused and what to write instead."""
    kind = ("null (no value)" if key is None else "a boolean" if isinstance(key, bool)
            else "a number" if isinstance(key, int | float) else type(key).__name__)
    return f"a key must be text, and YAML reads this one as {kind}: quote it (\"{written(key)}\": …)"


def with_text_keys(value: Any) -> Any:
    """``value`` with every key that is no text written as text (:func:`written`), for the checks of the rest."""
    if isinstance(value, Mapping):
        return {key if isinstance(key, str) else written(key): with_text_keys(item) for key, item in value.items()}
    if isinstance(value, list):
        return [with_text_keys(item) for item in value]
    return value
