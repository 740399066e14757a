"""Read a pipeline YAML file into plain Python values *and* the line of every key and item.

Validation messages must say where the problem is; PyYAML's node tree knows each node's start line,
so the file is composed once and converted, recording ``path -> line`` (path = tuple of keys/indexes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from connector_ops.kernel.yaml_text import TextLoader

Path = tuple[str | int, ...]


@dataclass
class Document:
    """A parsed pipeline file: its values, the line of each path, and where it came from."""

    data: Any
    file: str
    lines: dict[Path, int] = field(default_factory=dict)

    def line(self, path: Path) -> int:
        """The line of ``path``, or of its nearest ancestor that has one (1 for the document)."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), 1)


class SourceError(Exception):
    """The file is not valid YAML; ``line`` is where the parser gave up."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


def _convert(node: yaml.Node, path: Path, lines: dict[Path, int], loader: TextLoader) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if isinstance(key, (dict, list)):
                raise SourceError("a mapping key must be a plain value", key_node.start_mark.line + 1)
            if key in result:
                raise SourceError(f"duplicate key {key!r}", key_node.start_mark.line + 1)
            child = (*path, key)
            result[key] = _convert(value_node, child, lines, loader)
            lines[child] = key_node.start_mark.line + 1
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, i), lines, loader) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def parse_yaml(text: str, file: str = "<string>") -> Document:
    """Parse ``text``; raises :class:`SourceError` with a line number on invalid YAML."""
    loader = TextLoader(text)  # safe, and a date stays the text it was written as
    try:
        node = loader.get_single_node()
        lines: dict[Path, int] = {}
        data = None if node is None else _convert(node, (), lines, loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise SourceError(f"invalid YAML: {exc.problem or exc}", (mark.line + 1) if mark else 1) from None
    finally:
        loader.dispose()
    return Document(data=data, file=file, lines=lines)
