"""YAML as the pipelines and the magic read it: safe, and a date or time left as the text it was written as.

PyYAML's safe loaders make ``2024-01-01`` a ``datetime.date``, which is no JSON value: an unquoted date in a
pipeline step's input passed ``pipeline validate`` and failed the run inside Dagster's serialisation, and
in the magic reached the actions as an object they cannot store. Every value here is text anyway, so a
date stays what the user typed, as YAML 1.2's core schema reads it too.
"""

from __future__ import annotations

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
