"""YAML as the pipelines and the magic read it: safe, and a date or a time of day left as the text it was
written as.

PyYAML's safe loaders make ``2024-01-01`` a ``datetime.date``, which is no JSON value: an unquoted date in a
pipeline step's input passed ``pipeline validate`` and failed the run inside Dagster's serialisation, and
in the magic reached the actions as an object they cannot store. They also read YAML 1.1's base-60 numbers:
``closes: 17:45`` was the integer 1065, ``lunch: 12:00:00`` 43200 and ``23:59.5`` 1439.5, while ``09:30``
(a leading zero is no base-60 number) stayed text, so a Validate of opening hours refused some rows and the
run succeeded. Every value here is text anyway, so a date and a time stay what the user typed, as YAML
1.2's core schema reads them too. YAML 1.2 has no ``=`` value key either, which PyYAML could not construct
(``op: =`` failed to load).

The rest stays YAML 1.1 as documented (docs/pipelines.md, docs/notebooks.md): ``yes``/``no``/``on``/``off``
are booleans, ``0755`` is octal, ``0x1f`` and ``0b101`` are numbers, ``1_000`` is 1000, ``.inf``/``.nan``
are floats.

Text written into YAML must also keep every character: YAML refuses some raw (DEL, C1 controls) and reads
others as line breaks, which a scalar folds into a space. :data:`YAML_BREAKS`, :func:`yaml_safe_json` and
:func:`not_single_quotable` say which, for the recorder's dumper and the magic's ``{{expr}}`` alike.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

import yaml

_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_VALUE = "tag:yaml.org,2002:value"
_NUMBERS = frozenset({"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"})
#: a number never holds a colon but in YAML 1.1's base 60 (``1:30``, ``190:20:30.15``)
_NO_COLON = "(?![^:]*:)"


def _without_base_60(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """PyYAML's int or float pattern refusing text with a colon: its base-60 forms, whatever its version
    spells them as, and nothing else."""
    return re.compile(_NO_COLON + pattern.pattern, pattern.flags)


def _text_times(loader: type[yaml.SafeLoader]) -> type[yaml.SafeLoader]:
    """``loader`` without implicit timestamps, base-60 numbers and the ``=`` value key (its own copy of the
    resolvers: ``yaml.SafeLoader``'s are shared with every other user of PyYAML)."""
    loader.yaml_implicit_resolvers = {
        first: [(tag, _without_base_60(pattern) if tag in _NUMBERS else pattern)
                for tag, pattern in resolvers if tag not in (_TIMESTAMP, _VALUE)]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    return loader


@_text_times
class TextLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` without implicit dates, times (base-60 numbers) and ``=``."""


@_text_times
class FastTextLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]  # chosen at import
    """The same at C speed, where PyYAML was built with libyaml (the C part parses; resolving is the Python
    resolvers above)."""


def _exact_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Decimal | float:
    """A YAML float as a ``Decimal`` of its own digits, as :func:`~connector_ops.kernel.json_text.read_json`
    reads a JSON one; ``.inf``, ``.nan`` and an explicit ``!!float 1:30.5``, which no ``Decimal`` spells, as
    PyYAML reads them (the payload check refuses the first two, naming the field)."""
    try:
        return Decimal(loader.construct_scalar(node).replace("_", ""))
    except InvalidOperation:
        return loader.construct_yaml_float(node)


class ExactNumberLoader(FastTextLoader):
    """The magic's YAML: :class:`FastTextLoader` with floats as ``Decimal`` (``1.50`` is stored ``"1.50"``, as
    its JSON form and a Push store it). Not the pipelines': a step's literal input is Dagster run config,
    whose numbers are JSON floats (a ``Decimal`` is no config value)."""


ExactNumberLoader.add_constructor("tag:yaml.org,2002:float", _exact_float)


#: characters YAML reads as line breaks besides ``\n`` and ``\r``: written raw in a single-quoted or plain
#: scalar the loader folds them (NEL came back as a space); double quotes keep them only escaped
YAML_BREAKS = frozenset("\x85\u2028\u2029")
_BREAKS = "".join(sorted(YAML_BREAKS))
#: what a YAML stream may not hold as it is (outside YAML's printable set: C0 controls but tab, LF and CR; DEL
#: and the C1 controls but NEL; surrogates; U+FFFE, U+FFFF — "unacceptable character") or reads as a break
_NOT_RAW = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_BREAKS}\ud800-\udfff\ufffe\uffff]")
#: what a single-quoted scalar, which has no escapes, cannot keep: the above, and ``\n`` and ``\r`` (folded)
_NOT_SINGLE_QUOTED = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f{_BREAKS}\ud800-\udfff\ufffe\uffff]")


def yaml_safe_json(text: str) -> str:
    """JSON text (a whole value, or a string's inside without its quotes) that a YAML loader reads as a JSON
    parser does: each character YAML refuses raw or reads as a line break is written ``\\uXXXX``, an escape
    JSON and YAML's double quotes share. Outside strings JSON text is ASCII, so only strings change."""
    return _NOT_RAW.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def not_single_quotable(text: str) -> str | None:
    """The first character of ``text`` a YAML single-quoted scalar cannot hold exactly, as ``\\uXXXX``, else
    ``None``."""
    match = _NOT_SINGLE_QUOTED.search(text)
    return None if match is None else f"\\u{ord(match.group()):04x}"
