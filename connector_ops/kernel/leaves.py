"""The scalar values inside a JSON-like value: what a message about it may quote (:mod:`.secrets`) and what
names in a run's config may refer to (gc)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


def leaves(value: Any) -> Iterator[Any]:
    """Every value inside ``value`` that is no mapping, list or tuple (``value`` itself when it is none), in
    order; a mapping's keys are not walked, its values are."""
    if isinstance(value, Mapping):
        for item in value.values():
            yield from leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from leaves(item)
    else:
        yield value
