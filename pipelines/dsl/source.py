"""Read a pipeline YAML file into plain Python values *and* the line of every key and item.

Validation messages must say where the problem is; PyYAML's node tree knows each node's start line,
so the file is composed once and converted, recording ``path -> line`` (path = tuple of keys/indexes).

A pipeline file may come from anyone who can write to ``CONNECTOR_OPS_PIPELINES_DIR``, and every file is read
when the code location loads: nesting deeper than :data:`MAX_DEPTH` and aliases repeating more than
:data:`MAX_ALIASED` values are problems of that file (a "billion laughs" file took 60 s and 2.5 GB, and deep
brackets a ``RecursionError`` that took every job down).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from connector_ops.kernel.yaml_text import TextLoader

Path = tuple[str | int, ...]
#: how deep keys and items may nest (a pipeline needs a handful of levels; a filter's JSON 100 at most)
MAX_DEPTH = 200
#: the tag of YAML's merge key ``<<``
_MERGE = "tag:yaml.org,2002:merge"
#: how many values aliases (``*name``) may repeat in one file, all aliases counted together
MAX_ALIASED = 10_000


@dataclass
class Document:
    """A parsed pipeline file: its values, the line of each path, and where it came from."""

    data: Any
    file: str
    lines: dict[Path, int] = field(default_factory=dict)
    #: values written somewhere else than ``file``: path -> (file, line) of what put them there (a ``--set``
    #: argument, a ``set:`` key of ``defs.yaml``), so a problem of such a value is reported where it was written
    elsewhere: dict[Path, tuple[str, int]] = field(default_factory=dict)

    def place(self, path: Path) -> tuple[str, int]:
        """File and line of ``path``: where its value, or its nearest ancestor's, was written."""
        path = tuple(path)
        while path:
            if path in self.elsewhere:
                return self.elsewhere[path]
            if path in self.lines:
                return self.file, self.lines[path]
            path = path[:-1]
        return self.file, self.lines.get((), 1)

    def line(self, path: Path) -> int:
        """The line of ``path``, or of its nearest ancestor that has one (1 for the document)."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), 1)

    def digest(self, files: Mapping[str, str] | None = None) -> str:
        """A short digest of the values (``--set`` overrides applied; comments and layout do not count) and of
        ``files``, the content digests of the local files the steps reference (``${file:path}``,
        :mod:`.local_files`): the version of the pipeline a job was compiled from, so a step can tell that its
        process loaded another one. Without files it is the values' alone, as before files counted."""
        text = repr(self.data) + (repr(sorted(files.items())) if files else "")
        return hashlib.sha256(text.encode()).hexdigest()[:16]


class SourceError(Exception):
    """The file is not valid YAML; ``line`` is where the parser gave up."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


class _Converter:
    """PyYAML's node tree to plain values, recording each path's line; bounded in depth and in what aliases
    repeat (an alias is the anchor's node object again, so a node met twice is a repeat)."""

    def __init__(self, loader: TextLoader) -> None:
        self.loader = loader
        self.lines: dict[Path, int] = {}
        self.seen: set[int] = set()
        self.repeated = 0
        #: id of a mapping node merged somewhere -> all its pairs (a mapping merged again is not walked again)
        self.merged: dict[int, dict[Any, tuple[yaml.Node, yaml.Node]]] = {}

    def convert(self, node: yaml.Node, path: Path) -> Any:
        line = node.start_mark.line + 1
        if len(path) > MAX_DEPTH:
            raise SourceError(f"values are nested more than {MAX_DEPTH} levels deep", line)
        if id(node) in self.seen:
            self.repeated += 1
            if self.repeated > MAX_ALIASED:
                raise SourceError(f"aliases repeat more than {MAX_ALIASED:,} values (the anchor of line {line} "
                                  "is one of them)", line)
        else:
            self.seen.add(id(node))
        self.lines[path] = line
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(item, (*path, i)) for i, item in enumerate(node.value)]
        return self.loader.construct_object(node, deep=True)

    def _mapping(self, node: yaml.MappingNode, path: Path) -> dict[Any, Any]:
        """A mapping's values; its explicit keys replace the ones a merge key (``<<: *base``) brings in, as YAML
        merges say (PyYAML's ``flatten_mapping`` put the merged pairs beside the explicit ones, so an override was
        taken for a duplicate key). Only a key written twice in the mapping itself is a duplicate."""
        pairs = dict(self._merged(node))
        explicit: set[Any] = set()
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self._key(key_node)
            if key in explicit:
                raise SourceError(f"duplicate key {key!r}", key_node.start_mark.line + 1)
            explicit.add(key)
            pairs.pop(key, None)  # an override takes the place of the merged key, at its own line
            pairs[key] = (key_node, value_node)
        result: dict[Any, Any] = {}
        for key, (key_node, value_node) in pairs.items():
            child = (*path, key)
            result[key] = self.convert(value_node, child)
            self.lines[child] = key_node.start_mark.line + 1
        return result

    def _merged(self, node: yaml.MappingNode) -> dict[Any, tuple[yaml.Node, yaml.Node]]:
        """The pairs the merge keys of ``node`` bring in, key -> (key node, value node): of a list of mappings
        the first one listed wins, and a merged mapping's own merges and overrides count as its keys. The node
        tree is not changed (``flatten_mapping`` rewrote an anchored mapping, so an alias of it later looked
        like one with its merged keys written out); each mapping is merged once, whatever aliases repeat it."""
        found: dict[Any, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE:
                continue
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in reversed(sources):  # the later ones first, so that the first one listed wins
                if not isinstance(source, yaml.MappingNode):
                    raise SourceError("a merge key `<<` takes a mapping (`<<: *base`) or a list of them",
                                      source.start_mark.line + 1)
                found.update(self._own_pairs(source))
        return found

    def _own_pairs(self, node: yaml.MappingNode) -> dict[Any, tuple[yaml.Node, yaml.Node]]:
        """All the pairs of a merged mapping (its merged ones replaced by its explicit ones), once per node."""
        if id(node) not in self.merged:
            pairs = dict(self._merged(node))
            for key_node, value_node in node.value:
                if key_node.tag != _MERGE:
                    key = self._key(key_node)
                    pairs.pop(key, None)
                    pairs[key] = (key_node, value_node)
            self.merged[id(node)] = pairs
        return self.merged[id(node)]

    def _key(self, key_node: yaml.Node) -> Any:
        key = self.loader.construct_object(key_node, deep=True)
        if isinstance(key, (dict, list)):
            raise SourceError("a mapping key must be a plain value", key_node.start_mark.line + 1)
        return key


def parse_yaml(text: str, file: str = "<string>") -> Document:
    """Parse ``text``; raises :class:`SourceError` with a line number on invalid YAML."""
    loader = TextLoader(text)  # safe, and a date stays the text it was written as
    converter = _Converter(loader)
    try:
        node = loader.get_single_node()
        data = None if node is None else converter.convert(node, ())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise SourceError(f"invalid YAML: {exc.problem or exc}{_tab_hint(exc)}",
                          (mark.line + 1) if mark else 1) from None
    except RecursionError:  # PyYAML's composer recurses per level, before any depth is ours to count
        raise SourceError(f"values are nested more than {MAX_DEPTH} levels deep", 1) from None
    finally:
        loader.dispose()
    return Document(data=data, file=file, lines=converter.lines)


def _tab_hint(exc: yaml.MarkedYAMLError) -> str:
    """What to do about a tab PyYAML stopped at ("found character '\\t' that cannot start any token", which does
    not say that YAML indents, and mostly separates, with spaces only); ``""`` for any other error. Whether the
    tab indents is read from PyYAML's own buffer, with its own line breaks."""
    mark = exc.problem_mark
    if mark is None or mark.buffer is None or "'\\t'" not in (exc.problem or ""):
        return ""
    start = mark.pointer
    while start > 0 and mark.buffer[start - 1] in " \t":
        start -= 1
    indents = start == 0 or mark.buffer[start - 1] in "\r\n\x85\u2028\u2029"
    return "; indent with spaces, not tabs" if indents else "; write spaces here, not a tab"


def value_of_key(text: str, line: int, column: int) -> Any:
    """The value of the mapping key written at ``line``, ``column`` (1-based) of the YAML ``text`` (any of its
    documents), read as :func:`parse_yaml` reads a pipeline file; :data:`NOT_FOUND` where no key starts there
    or the text is not valid YAML. For a pipeline inside a file another loader read (Dagster's ``defs.yaml``,
    with YAML 1.1's base-60 numbers: ``17:45`` as 1065), to have its values as a pipeline file's."""
    loader = TextLoader(text)
    try:
        while loader.check_node():
            found = _value_node(loader.get_node(), line - 1, column - 1)
            if found is not None:
                return _Converter(loader).convert(found, ())
    except (yaml.YAMLError, SourceError, RecursionError):
        pass
    finally:
        loader.dispose()
    return NOT_FOUND


#: what :func:`value_of_key` gives where it finds no value
NOT_FOUND = object()


def _value_node(root: yaml.Node | None, line: int, column: int) -> yaml.Node | None:
    """The value node of the mapping key at ``line``, ``column`` (0-based) below ``root``: each node looked at
    once (an alias is its anchor's node again, which "billion laughs" repeats), only those spanning ``line``."""
    todo, seen = [root] if root is not None else [], set()
    while todo:
        node = todo.pop()
        if id(node) in seen or not node.start_mark.line <= line <= node.end_mark.line:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if (key.start_mark.line, key.start_mark.column) == (line, column):
                    return value
                todo += (key, value)
        elif isinstance(node, yaml.SequenceNode):
            todo += node.value
    return None
