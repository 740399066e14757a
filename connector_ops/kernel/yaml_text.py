"""YAML as the pipelines and the magic read it: safe, and a date or time left as the text it was written as.

PyYAML's safe loaders make ``2024-01-01`` a ``datetime.date``, which is no JSON value: an unquoted date in a
pipeline step's input passed ``pipeline validate`` and failed the run inside Dagster's serialisation, and
in the magic reached the actions as an object they cannot store. Every value here is text anyway, so a
date stays what the user typed, as YAML 1.2's core schema reads it too.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

import yaml

_TIMESTAMP = "tag:yaml.org,2002:timestamp"


def _without_timestamps(loader: type[yaml.SafeLoader]) -> type[yaml.SafeLoader]:
    loader.yaml_implicit_resolvers = {
        first: [(tag, pattern) for tag, pattern in resolvers if tag != _TIMESTAMP]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    return loader


@_without_timestamps
class TextLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` without implicit dates and times."""


@_without_timestamps
class FastTextLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The same at C speed, where PyYAML was built with libyaml."""


def _exact_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Decimal | float:
    """A YAML float as a ``Decimal`` of its own digits, as :func:`~connector_ops.kernel.json_text.read_json`
    reads a JSON one; ``.inf``, ``.nan`` and base 60 (``1:30.5``), which no ``Decimal`` spells, as PyYAML reads
    them (the payload check refuses the first two, naming the field)."""
    try:
        return Decimal(loader.construct_scalar(node).replace("_", ""))
    except InvalidOperation:
        return loader.construct_yaml_float(node)


class ExactNumberLoader(FastTextLoader):
    """The magic's YAML: :class:`FastTextLoader` with floats as ``Decimal`` (``1.50`` is stored ``"1.50"``, as
    its JSON form and a Push store it). Not the pipelines': a step's literal input is Dagster run config,
    whose numbers are JSON floats (a ``Decimal`` is no config value)."""


ExactNumberLoader.add_constructor("tag:yaml.org,2002:float", _exact_float)
