"""The input side of the notebook magics: ``{{name}}`` substitution and JSON / YAML parsing.

A magic's input is the spec's JSON input, written as JSON or YAML (flow ``{a: 1}`` on a line, flow or
block style in a cell body). ``{{expr}}`` inserts a Python value from the notebook:

* inside a quoted string it is inserted as *text* (escaped for that kind of quote), so
  ``"{{vf}}"`` or ``"report-{{day}}.csv"`` build strings;
* anywhere else it is inserted as the value's *JSON*, so ``{"platformFile": {{pf}}}`` passes a whole
  descriptor and ``{"maxBatchSize": {{n}}}`` a number.

Either way the value parses back exactly, as JSON or as YAML (a row value may come from a stranger's file):
what YAML refuses raw or reads as a line break is written ``\\uXXXX``; in YAML's ``'…'``, which has no
escapes, such a value is a 400 saying to write ``"{{v}}"`` or ``{{v}}``.

``expr`` is a Jinja expression evaluated in the notebook's namespace (``vf``, ``out.virtualFileId``,
``rows[0]["city"]``, ``name | upper``); an undefined name is an error, never an empty string. Parsing
errors and substitution errors are reported as :class:`ConnectorError` (400) like any other bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import functools
import json
import keyword
import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import PurePath
from typing import Any, NoReturn

import jinja2
import yaml
from pydantic import BaseModel

from connector_ops.kernel.errors import ConnectorError
from connector_ops.kernel.json_text import json_text, read_json
from connector_ops.kernel.limits import holds_surrogate, lone_surrogate, surrogate_refused
from connector_ops.kernel.yaml_text import ExactNumberLoader, not_single_quotable, yaml_safe_json

_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
#: characters after which a quote opens a string (JSON always; YAML at the start of a scalar)
_QUOTE_OPENERS = frozenset("{[,:-?")
_JINJA = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)


class InputError(ConnectorError):
    """The magic's input could not be read (status 400, like invalid input to the action)."""

    def __init__(self, message: str, action: str | None = None) -> None:
        super().__init__(400, {"message": message}, action=action)


class WordsParser(argparse.ArgumentParser):
    """argparse for a line magic's words: a usage problem is an :class:`InputError` with argparse's reason
    (``%pipeline run: the following arguments are required: target``), nothing printed. Python 3.11's
    ``exit_on_error=False`` is not enough: a missing argument or an unknown option still prints the usage
    to stderr and exits."""

    def __init__(self, prog: str, action: str) -> None:
        super().__init__(prog=prog, add_help=False)
        self.action = action

    def error(self, message: str) -> NoReturn:
        raise InputError(f"{self.prog}: {message}", action=self.action)


def python_name(text: str) -> str:
    """argparse ``type`` of the options naming a notebook variable (``-o VAR``, ``--df NAME``): a name that is
    no Python identifier (``my-var``, ``big;``) would be stored where no cell can read it back, so it is a
    usage error (``argument -o/--out: 'my-var' is not a Python variable name``), a 400 like any other."""
    if text.isidentifier() and not keyword.iskeyword(text):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not a Python variable name "
                                     "(letters, digits and _, not starting with a digit, not a keyword)")


@functools.lru_cache(maxsize=512)
def _compiled(expression: str) -> Callable[..., Any]:
    try:
        return _JINJA.compile_expression(expression, undefined_to_none=False)
    except jinja2.TemplateSyntaxError as exc:
        raise InputError(f"{{{{{expression}}}}}: {exc.message}") from None


def evaluate(expression: str, namespace: Mapping[str, Any]) -> Any:
    """The value of ``{{expression}}`` in ``namespace``; undefined names are errors."""
    expression = expression.strip()
    if not expression:
        raise InputError("{{}}: an empty placeholder; write {{name}} with a variable name")
    try:
        value = _compiled(expression)(**namespace)
    except jinja2.UndefinedError as exc:
        raise InputError(f"{{{{{expression}}}}}: {exc.message}") from None
    except InputError:
        raise
    except Exception as exc:  # the expression itself failed (user code)
        raise InputError(f"{{{{{expression}}}}}: {type(exc).__name__}: {exc}") from None
    if isinstance(value, jinja2.Undefined):
        raise InputError(f"{{{{{expression}}}}}: {value._undefined_message}")
    return value


def jsonable(value: Any) -> Any:
    """``json.dumps`` fallback: models, DataFrames, numpy scalars, decimals, paths and dates become JSON values."""
    if isinstance(value, BaseModel):
        return value.model_dump(by_alias=True, mode="json")
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, _dt.date | _dt.datetime | _dt.time):
        return value.isoformat()
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    if type(value).__module__.startswith("pandas") and hasattr(value, "notna"):
        return _pandas_values(value)
    if type(value).__module__.startswith("numpy") and hasattr(value, "tolist"):
        return value.tolist()  # arrays become lists, numpy scalars Python numbers
    if isinstance(value, Decimal):  # for json.dumps (the recorder's keys); to_json_text writes its own digits
        return float(value)
    raise TypeError(f"a {type(value).__name__} is not a JSON value")


def _pandas_values(value: Any) -> list[Any]:
    """A DataFrame as records, a Series as a list, every float digit kept (``to_json`` keeps 10 at most 15
    significant digits); missing and infinite values become ``null`` as ``to_json`` makes them."""
    present = value.notna() & ~value.isin([math.inf, -math.inf])
    native = value.astype(object).where(present, None)  # Python values: floats, ints, str, Timestamps
    return native.to_dict(orient="records") if hasattr(value, "columns") else native.tolist()


def to_json_text(value: Any) -> str:
    """The JSON a ``{{…}}`` inserts: ``json.dumps``'s spacing, a ``Decimal`` (a number as the magic reads one)
    with its own digits, so ``{{price}}`` of ``1.50`` is stored ``"1.50"`` as the same number typed in the
    cell, or pushed, is."""
    return json_text(value, default=jsonable)


def _interpolated(value: Any) -> str:
    """How a value reads inside a string: strings as they are, values whose JSON is a string (a path, a
    date) as that string — ``"report-{{day}}.csv"`` is ``report-2024-01-01.csv`` — everything else as JSON
    (a ``Decimal``'s own digits: ``"{{price}}"`` of ``1.50`` is ``"1.50"``)."""
    if not isinstance(value, str | Decimal):
        with contextlib.suppress(TypeError):
            value = jsonable(value)
    return value if isinstance(value, str) else to_json_text(value)


def _inserted(value: Any, quote: str, expression: str) -> str:
    """``value`` written for ``quote`` (``"``, ``'`` or none: JSON) so that it parses back exactly, as JSON or
    as YAML: characters YAML refuses raw or reads as line breaks (DEL, NEL, U+2028…) are ``\\uXXXX`` where
    escapes exist; a ``'…'`` string has none, so a value it cannot hold is a 400 saying what to write."""
    placeholder = f"{{{{{expression}}}}}"
    try:
        if quote == "'":
            text = _checked(_interpolated(value), placeholder)
            if (char := not_single_quotable(text)) is not None:
                raise InputError(f"{placeholder}: the value holds {char}, which YAML cannot keep in a '…' string "
                                 f"(it has no escapes): write \"{placeholder}\" or {placeholder}")
            return text.replace("'", "''")
        text = json.dumps(_interpolated(value), ensure_ascii=False)[1:-1] if quote == '"' else to_json_text(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{placeholder}: {exc}") from None
    return yaml_safe_json(_checked(text, placeholder))


def _checked(text: str, placeholder: str) -> str:
    """``text``, unless it holds half a surrogate pair: JSON could spell it but YAML cannot, and no action
    takes one, so it is refused naming the placeholder rather than as a YAML error or a crash."""
    if (half := lone_surrogate(text)) is not None:
        raise InputError(f"{placeholder}: the value {holds_surrogate(half)}")
    return text


def _quote_opens(text: str, index: int) -> bool:
    """Whether the quote at ``index`` starts a string (not an apostrophe inside a plain word)."""
    j = index - 1
    while j >= 0 and text[j] in " \t":
        j -= 1
    return j < 0 or text[j] == "\n" or text[j] in _QUOTE_OPENERS


def substitute(text: str, namespace: Mapping[str, Any], seen: list[tuple[str, Any]] | None = None) -> str:
    """Replace every ``{{expr}}`` in ``text``: as escaped text inside quotes, as JSON elsewhere. Each
    ``(expr, value)`` is appended to ``seen`` when it is given (``%pipeline record`` reads there which
    output a cell named)."""
    if "{{" not in text:
        return text
    out: list[str] = []
    quote = ""  # the open quote character, "" outside strings
    i, n = 0, len(text)
    while i < n:
        if text.startswith("{{", i):
            match = _PLACEHOLDER.match(text, i)
            if match is None:
                raise InputError("an opening {{ has no closing }}")
            value = evaluate(match.group(1), namespace)
            if seen is not None:
                seen.append((match.group(1).strip(), value))
            out.append(_inserted(value, quote, match.group(1).strip()))
            i = match.end()
            continue
        char = text[i]
        if quote == '"':
            if char == "\\":
                out.append(text[i:i + 2])
                i += 2
                continue
            if char == '"':
                quote = ""
        elif quote == "'":
            if char == "'":
                if text.startswith("''", i):  # YAML's escaped quote
                    out.append("''")
                    i += 2
                    continue
                quote = ""
        elif char in "\"'" and _quote_opens(text, i):
            quote = char
        elif char == "#" and (i == 0 or text[i - 1] in " \t\n"):  # a YAML comment: copy it as it is
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(text[i:end])
            i = end
            continue
        out.append(char)
        i += 1
    return "".join(out)


#: input written as JSON: its first key or item, after the opening brackets, is a double-quoted string
_JSON_LIKE = re.compile(r'^[\[{\s]*"')


def _at(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """YAML's problem and where, with what it was reading and from where (an unclosed brace is reported
    where the input ends: the flow mapping's start says which brace)."""
    mark, context_mark = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    text = f"{problem} ({_at(mark)})" if mark else problem
    context = getattr(exc, "context", None)
    return f"{text}, {context} from {_at(context_mark)}" if context and context_mark else text


def parse(text: str) -> Any:
    """The input as a Python value: JSON first (fast, exact), else YAML (flow or block style)."""
    text = text.strip()
    if not text:
        return {}
    try:
        return read_json(text)
    except json.JSONDecodeError as json_error:
        try:  # safe, dates kept as text, floats as Decimal as from JSON (C speed when available)
            return yaml.load(text, Loader=ExactNumberLoader)
        except UnicodeEncodeError as exc:  # libyaml reads UTF-8: half a surrogate pair typed in the cell
            raise InputError(f"input {holds_surrogate(surrogate_refused(exc) or '?')}") from None
        except yaml.YAMLError as yaml_error:
            if _JSON_LIKE.match(text):  # YAML flow style ({a: "x"}) gets YAML's problem, not JSON's
                problem = f"{json_error.msg} (line {json_error.lineno}, column {json_error.colno})"
            else:
                problem = _yaml_problem(yaml_error)
            raise InputError(f"input is not valid JSON or YAML: {problem}") from None


def read_input(text: str, namespace: Mapping[str, Any], seen: list[tuple[str, Any]] | None = None) -> Any:
    """Substitute ``{{expr}}`` placeholders, then parse; the value given to the action."""
    return parse(substitute(text, namespace, seen))
