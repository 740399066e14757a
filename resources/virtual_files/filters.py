"""MongoDB query-filter documents compiled to SQL over a virtual file's TEXT columns.

Shared by Delete Rows and Query (research/etl.md §1). A filter is first *parsed* into a small tree
(every malformed or unsupported construct is an ``InvalidInput`` naming the operator, before any SQL
runs), then *compiled* to one SQLAlchemy expression, so matching happens in the database.

The rules that make the SQL agree with MongoDB (differentially tested against mongomock):

* Stored values are strings or NULL, and NULL means "missing" (Push/Append store a JSON ``null`` as
  NULL too). Type bracketing therefore reduces to: a number or boolean operand matches no stored value
  (so ``$ne: 5`` matches every row), a string operand only compares with strings.
* ``$ne $nin $not $nor`` match rows where the column is missing. SQL's three-valued logic would drop
  them (``NOT (NULL = 'x')`` is NULL), so under a negation every leaf is emitted in a two-valued form
  (``c IS NOT NULL AND c = 'x'``). In positive context the plain form is kept, because NULL and FALSE
  select the same rows there and the plain form lets the planner use an index.
* String order is code-point order: SQLite's BINARY collation, ``COLLATE "C"`` on PostgreSQL.
* ``$regex`` runs on RE2 (``google-re2``), an engine without backtracking: matching takes time linear in
  the value's length whatever the pattern, so ``^(a+)+$`` cannot stall a query. The syntax is Python's
  (flags ``i m s x``; ``$`` also matches before a final newline, as in Python and MongoDB's PCRE),
  translated where RE2 reads it otherwise (:func:`re2_syntax`), minus what needs backtracking
  (backreferences, lookaround, …), which is refused with a 400 naming it. It is a UDF on SQLite; on PostgreSQL, whose
  regular expressions are neither, the columns are read through one server-side cursor, matched in Python,
  and each leaf's matching ``seq`` values go into one temporary table the SQL then refers to.
* Long lists stay one parameter: ``$in`` with more than ``LONG_IN`` values binds them as one array
  (``= ANY(:values)`` on PostgreSQL, ``IN (SELECT value FROM json_each(:values))`` on SQLite), so 100,000
  values never meet a driver's parameter limit; a filter whose short lists would bind more than
  ``MAX_PARAMETERS`` values in all binds every list so, and one that needs more still is a 400. Wide
  ``$or``/``$and`` compile to balanced trees, so 3,000 clauses stay within SQLite's expression depth, and
  one column's equalities and ``$in`` lists under one ``$or`` are one ``$in``, and its composite keys
  (equalities on the same columns) one row-value membership, ``(a, b) IN (…)`` (:func:`_or`,
  :func:`_rows_sql`), a long list of them bound as one array a column (PostgreSQL) or one JSON (SQLite).
* A key is a literal column name (rows are flat; ``"customer.id"`` is the column ``customer.id``); a
  column the virtual file does not have is missing in every row. Names are looked up in the catalog's
  column map and never reach SQL text; values are always bound parameters.
"""

from __future__ import annotations

import functools
import itertools
import operator
import re
import unicodedata
import uuid
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import UnaryExpression
from sqlalchemy.sql.operators import custom_op
from sqlalchemy.sql.visitors import InternalTraversal

from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.limits import refuse_nul_for_postgres
from connector_ops.resources.virtual_files.engines import SQLITE_FUNCTIONS, room_to_hash_keys
from connector_ops.resources.virtual_files.fetching import stream

COMPARISONS = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
FIELD_OPERATORS = {"$eq", "$ne", "$in", "$nin", "$exists", "$regex", "$options", "$not", *COMPARISONS}
LOGICAL_OPERATORS = {"$and", "$or", "$nor"}
#: MongoDB operators we know and refuse (a clearer message than "unknown operator").
UNSUPPORTED = {
    "$where", "$expr", "$function", "$accumulator", "$jsonSchema", "$text", "$comment", "$elemMatch", "$size",
    "$all", "$type", "$mod", "$bitsAllSet", "$bitsAnySet", "$bitsAllClear", "$bitsAnyClear", "$geoWithin",
    "$geoIntersects", "$near", "$nearSphere", "$sampleRate", "$getField",
}
REGEX_OPTIONS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}
REGEX_BATCH = 20_000
#: ``$in`` lists longer than this are bound as one array parameter
LONG_IN = 100
#: the most values one filter binds: below PostgreSQL's 65,535 parameters a statement and SQLite's default
#: 32,766 (the Python here is built with 250,000, others are not), with room for the rest of the statement.
#: A filter past it binds each list of values as one array (:func:`_list_threshold`), and is refused past
#: it still
MAX_PARAMETERS = 30_000
#: children of one SQL AND/OR node; wider ones become a balanced tree of groups
FAN_OUT = 16
#: ``$regex`` leaves on PostgreSQL up to which an ``$and``'s become semi-joins (:class:`_PythonRegexSeqs`)
JOINED_REGEX_LEAVES = 8
#: a number operand: JSON's, as Python reads it (an entry point's reader makes a fraction a ``Decimal``)
NUMBER = int | float | Decimal


# -- the parsed filter ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Match:
    """The column's value is one of ``values`` (strings), or the column is missing when ``missing``."""

    column: str
    values: tuple[str, ...]
    missing: bool = False


@dataclass(frozen=True)
class RowMatch:
    """The values of ``columns`` together are one of ``rows`` (tuples of strings, in ``columns``' order); a row
    missing any of them never matches. What an ``$or`` of compound equalities means (:func:`_or`): a list of
    composite keys, compiled as one row-value membership instead of an OR of ANDs evaluated per row."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Compare:
    """``column <op> value`` for a string ``value`` (code-point order); missing never compares."""

    column: str
    op: str
    value: str


@dataclass(frozen=True)
class Regex:
    """``re.search(pattern, value)`` with MongoDB's ``$options`` letters; only strings match."""

    column: str
    pattern: str
    options: str

    @property
    def compiled(self) -> Any:
        """An RE2 pattern (``.search(text)``)."""
        return _compile_regex(self.pattern, self.options)

    @property
    def found(self) -> Callable[[str], bool]:
        """Whether the pattern occurs in a text (:func:`_finder`)."""
        return _finder(self.pattern, self.options)


@dataclass(frozen=True)
class Const:
    value: bool


@dataclass(frozen=True)
class Op:
    """``and`` / ``or`` over children, or ``not`` of its single child."""

    kind: str
    children: tuple[Node, ...]


Node = Match | RowMatch | Compare | Regex | Const | Op
TRUE, FALSE = Const(True), Const(False)


def _and(children: Sequence[Node]) -> Node:
    return children[0] if len(children) == 1 else Op("and", tuple(children))


def _not(child: Node) -> Node:
    """``not child``; a double negation is the child itself. A node selects rows or not (never NULL: under a
    NOT each leaf is two-valued), so NOT NOT x selects x's rows, and each NOT costs SQLite's parser stack
    a level: ``$not`` (or a one-clause ``$nor``) in ``$not`` 45 deep overflowed it."""
    if isinstance(child, Op) and child.kind == "not":
        return child.children[0]
    return Op("not", (child,))


@functools.lru_cache(maxsize=256)
def _compile_regex(pattern: str, options: str) -> Any:
    try:
        return _compile_re2(pattern, options)
    except RecursionError:  # Python's parser, and our walks of what it parsed, recurse once per nested group
        raise re.error("groups nested more deeply than Python's parser can read (a few hundred levels)") from None


#: CPython's own parser of regular expressions (``re._parser``, Python 3.11+): private, so typeshed has no stub
_RE_PARSER: Any = re._parser  # type: ignore[attr-defined]


def _compile_re2(pattern: str, options: str) -> Any:
    import re2

    python_flags = functools.reduce(operator.or_, (REGEX_OPTIONS[c] for c in options), 0)
    with warnings.catch_warnings():  # Python's syntax is the contract: its errors first, in its words
        warnings.simplefilter("error", FutureWarning)
        try:
            # the parser itself, not re.compile: a pattern in re's cache (any re.search of it elsewhere in the
            # process) is not parsed again, so it would not warn, and the refusal would depend on that cache
            parsed = _RE_PARSER.parse(pattern, python_flags)
            re.compile(pattern, python_flags)  # what only the compiler checks
        except FutureWarning as exc:  # "[[:alpha:]]": a set of "[:alph" today, in a later Python maybe not
            raise re.error(f"{exc}: Python reads this as characters today but may not later; escape them "
                           "(\\[, \\-, \\&, \\~, \\|)") from None
        except OverflowError as exc:  # a repeat past Python's own limit: "a{99999999999}"
            raise re.error(str(exc)) from None
    backtracking = _needs_backtracking(parsed)
    if backtracking:
        raise re.error(f"{backtracking} are not supported ($regex runs on RE2, which matches in linear time "
                       "and so cannot backtrack)")
    pattern, options = _global_flags(pattern, options)
    if "m" not in options and _dollar_before_more(parsed):
        raise re.error("$ with more pattern after it is not supported: Python's $ matches before a final "
                       "newline without taking it, which RE2 (which $regex runs on, without lookahead) cannot "
                       "say; end the pattern, or an alternative at its end, with $, or match the newline "
                       "itself (\\n\\Z)")
    ignorecase = "i" in options or _IGNORECASE_GROUP.search(pattern) is not None
    text = re2_syntax(pattern, verbose="x" in options, multiline="m" in options, ignorecase=ignorecase)
    flags = "".join(c for c in "ims" if c in options)
    settings = re2.Options()
    settings.log_errors = False
    try:
        return re2.compile(f"(?{flags}){text}" if flags else text, settings)
    except re2.error as exc:
        raise re.error(_re2_problem(exc)) from None


def _re2_problem(exc: Exception) -> str:
    """RE2's refusal in a user's words: google-re2 gives its message as bytes (``b'invalid perl operator:
    (?#'``), and ``invalid repetition size: {5}`` does not say that it counts the repeats inside it."""
    detail = exc.args[0] if exc.args else str(exc)
    if isinstance(detail, bytes):
        detail = detail.decode(errors="replace")
    size = detail.removeprefix("invalid repetition size: ")
    if size != detail:
        return (f"the repeat {size}, times the repeats inside it, asks for more than {RE2_MAX_REPEAT} "
                "repetitions, the most RE2 (which $regex runs on) allows; use * or + for \"any number\"")
    return f"{detail} (RE2, which $regex runs on, does not read this part of Python's syntax)"


#: what needs backtracking, by the opcodes of Python's own parser that stand for it
_BACKTRACKING = {"GROUPREF": "backreferences", "GROUPREF_EXISTS": "conditionals on a group",
                 "ASSERT": "lookaround assertions", "ASSERT_NOT": "lookaround assertions",
                 "ATOMIC_GROUP": "atomic groups", "POSSESSIVE_REPEAT": "possessive quantifiers"}


def _needs_backtracking(parsed: Any) -> str | None:
    """The first construct of a parsed pattern that only a backtracking engine runs, in words, or None."""
    for op, value in parsed:
        found = _BACKTRACKING.get(str(op))
        if found:
            return found
        for part in value if isinstance(value, tuple | list) else ():
            if isinstance(part, _RE_PARSER.SubPattern):
                found = _needs_backtracking(part)
            elif isinstance(part, list):  # a branch's alternatives
                found = next(filter(None, (_needs_backtracking(p) for p in part
                                           if isinstance(p, _RE_PARSER.SubPattern))), None)
            if found:
                return found
    return None


def _dollar_before_more(parsed: Any, last: bool = True) -> bool:
    """Whether a ``$`` of a parsed pattern may have more of the pattern after it. ``$`` becomes
    ``(?:\\n?\\z)`` for RE2, which takes the final newline Python's ``$`` only looks at: the same matches
    only where nothing follows (last in the pattern, in an alternative or group that is, in a repeat of at
    most one), while ``line$\\n`` would miss ``"line\\n"``. ``last``: nothing follows ``parsed``."""
    for k, (op, value) in enumerate(parsed):
        final = last and k == len(parsed) - 1
        kind = str(op)
        if kind == "AT" and str(value) == "AT_END" and not final:
            return True
        if kind == "SUBPATTERN":
            inner = [value[-1]]
        elif kind == "BRANCH":
            inner = value[1]
        elif kind in ("MAX_REPEAT", "MIN_REPEAT"):
            inner, final = [value[2]], final and value[1] <= 1
        else:
            continue
        if any(_dollar_before_more(part, final) for part in inner):
            return True
    return False


#: a group's flags that include ``i`` (``(?i:``, ``(?ai:``)
_IGNORECASE_GROUP = re.compile(r"\(\?[aiLmsux]*i[aiLmsux]*(?:-[imsx]+)?:")


#: Python's flags written at the start of a pattern (``(?x)``, ``(?ai)``): RE2 reads ``i m s`` there, and
#: ``x`` is done by the translation; ``a`` and ``u`` change nothing RE2 does (its classes are ASCII)
_GLOBAL_FLAGS = re.compile(r"\(\?([aiLmsux]+)\)")


def _global_flags(pattern: str, options: str) -> tuple[str, str]:
    """The pattern without its leading flags, which join ``options``."""
    while match := _GLOBAL_FLAGS.match(pattern):
        pattern, options = pattern[match.end():], options + "".join(c for c in match[1] if c in "imsx")
    return pattern, options


@functools.lru_cache(maxsize=256)
def _finder(pattern: str, options: str) -> Callable[[str], bool]:
    """``compiled.search(text) is not None``, calling RE2's matcher straight. google-re2's ``search`` wraps
    each call in Python that maps byte offsets back to characters, for a match object this never uses:
    1M values took 7.3 s that way. Where the package's internals differ, it is ``search`` after all."""
    import re2

    compiled = _compile_regex(pattern, options)
    try:
        match, unanchored = compiled._regexp.Match, re2._Anchor.UNANCHORED
    except AttributeError:  # another google-re2 than the one measured
        return lambda text: compiled.search(text) is not None

    def found(text: str) -> bool:
        encoded = text.encode()
        return match(unanchored, encoded, 0, len(encoded))[0] != (-1, -1)

    return found


def re2_syntax(pattern: str, *, verbose: bool, multiline: bool, ignorecase: bool = False) -> str:
    """Python's regular-expression syntax in RE2's: ``\\Z`` is ``\\z``; without ``m``, ``$`` also matches
    before a final newline; with ``x``, whitespace and ``#`` comments outside classes are dropped; a ``{``
    is a repeat exactly where Python reads one (:func:`_brace`); ``(?#…)`` comments are dropped; ``a`` and
    ``u`` on a group change nothing RE2 does (its classes are ASCII), unless case is ignored; a ``[`` in a
    class is a character (RE2 would read ``[:alpha:]``); escapes as :func:`_escape` says."""
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            c, i = _escape(pattern, i, in_class)
            out.append(c)
            continue
        i += 1
        if in_class:
            in_class = c != "]"
            if c == "[":
                c = "\\["
        elif c == "[":
            in_class = True
            if pattern.startswith("^", i):
                c, i = "[^", i + 1
            if pattern.startswith("]", i):  # a "]" first in a class is literal
                c, i = c + "\\]", i + 1
        elif verbose and c.isspace():
            continue
        elif verbose and c == "#":
            while i < n and pattern[i] != "\n":
                i += 1
            continue
        elif c == "$" and not multiline:
            c = "(?:\\n?\\z)"
        elif c == "{":
            c, i = _brace(pattern, i)
        elif c == "(" and pattern.startswith("?#", i):  # a comment: up to the first ")" not escaped
            while pattern[i] != ")":
                i += 2 if pattern[i] == "\\" else 1
            i += 1
            continue
        elif c == "(" and (group := _GROUP_FLAGS.match(pattern, i)):
            c, i = _group_flags(group, ignorecase=ignorecase), group.end()
        out.append(c)
    return "".join(out)


#: what Python reads as a repeat after a ``{`` (``{}``, or anything else, is the character ``{``): digits
#: and one comma only, so with ``x`` ``a{1, 3}`` is the text ``a{1,3}``, since the space is not skipped
#: inside the braces while deciding, and only dropped afterwards
_REPEAT = re.compile(r"([0-9]*)(?:(,)([0-9]*))?\}")
#: the most RE2 repeats an item (``{n}``, ``{n,m}``), also counting repeats nested in it
RE2_MAX_REPEAT = 1000


def _brace(pattern: str, i: int) -> tuple[str, int]:
    """The ``{`` before ``pattern[i]`` in RE2's syntax, and where the pattern goes on: a repeat where Python
    reads one (with ``{,n}`` as ``{0,n}``, which RE2 reads as text), else an escaped ``{``, which RE2
    would otherwise read as a repeat once ``x`` dropped the spaces in ``{1, 3}``."""
    repeat = _REPEAT.match(pattern, i)
    if repeat is None or repeat[0] == "}":
        return "\\{", i
    low, comma, high = repeat.groups()
    if any(int(n) > RE2_MAX_REPEAT for n in (low, high) if n):
        raise re.error(f"the repeat {{{repeat[0]} asks for more than {RE2_MAX_REPEAT} repetitions, the most "
                       f"RE2 (which $regex runs on) allows; use * or + for \"any number\"")
    return f"{{{low or 0}{comma or ''}{high or ''}}}", repeat.end()


_GROUP_FLAGS = re.compile(r"\?([aiLmsux]*)(?:-([imsx]+))?:")


def _group_flags(group: re.Match[str], *, ignorecase: bool) -> str:
    """A group's flags (``(?i:``, ``(?a-s:``) in RE2's syntax: ``a`` and ``u`` dropped, as RE2's ``\\d \\w
    \\s \\b`` are ASCII already; ``m`` and ``x`` refused, since the translation of ``$`` and of whitespace
    is the whole pattern's."""
    on, off = group[1], group[2] or ""
    if {"m", "x"} & set(on + off):
        raise re.error("the flags m and x on a group are not supported here (the translation of $ and "
                       "of whitespace is the whole pattern's): give them at its start or in $options")
    if "a" in on and (ignorecase or "i" in on):
        raise re.error("the flag a on a group is not supported with i: Python then ignores case in ASCII "
                       "only, RE2 (which $regex runs on) in all of Unicode (k would match the Kelvin sign K)")
    on = on.replace("a", "").replace("u", "")
    return f"(?{on}{'-' + off if off else ''}:"


def _escape(pattern: str, i: int, in_class: bool) -> tuple[str, int]:
    """The escape at ``pattern[i]`` in RE2's syntax, and where the pattern goes on: ``\\uXXXX``,
    ``\\UXXXXXXXX`` and ``\\N{NAME}`` as ``\\x{…}``; ``\\s`` as Python's ASCII whitespace, which has the
    vertical tab RE2's lacks; ``\\b`` in a class, a backspace."""
    e = pattern[i + 1]
    if e == "Z" and not in_class:
        return "\\z", i + 2
    if e in "uU":
        end = i + (6 if e == "u" else 10)
        return f"\\x{{{pattern[i + 2:end]}}}", end
    if e == "N":
        end = pattern.index("}", i)
        return f"\\x{{{ord(unicodedata.lookup(pattern[i + 3:end])):x}}}", end + 1
    if e in "sS":
        posix = "[:space:]" if e == "s" else "[:^space:]"
        return (posix if in_class else f"[{posix}]"), i + 2
    if e == "b" and in_class:
        return "\\x08", i + 2
    return pattern[i:i + 2], i + 2


# -- parsing (all validation happens here) -------------------------------------------------------
def parse_filter(flt: Any, field: str = "request") -> Node:
    """Validate a filter document and turn it into a tree; ``InvalidInput`` names the offending part."""
    if not isinstance(flt, Mapping):
        raise InvalidInput(field, f"a filter must be an object, got {_kind(flt)}")
    clauses: list[Node] = []
    for key, value in flt.items():
        path = f"{field}.{key}"
        if not isinstance(key, str):
            raise InvalidInput(field, f"keys must be strings, got {key!r}")
        if "\x00" in key:  # no column name holds one; an operand may (SQLite keeps it in a value)
            raise InvalidInput(field, f"a key holds a NUL character: {key!r}")
        if key in LOGICAL_OPERATORS:
            clauses.append(_parse_logical(key, value, path))
        elif key.startswith("$"):
            raise InvalidInput(path, _operator_problem(key, top_level=True))
        else:
            clauses.append(_parse_field(key, value, path))
    return _and(clauses) if clauses else TRUE


def _parse_logical(op: str, value: Any, path: str) -> Node:
    if not isinstance(value, list) or not value:
        raise InvalidInput(path, f"{op} must be a non-empty array of filter documents")
    children = [parse_filter(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if op == "$and":
        return _and(children)
    either = _or(children)
    return either if op == "$or" else _not(either)


def _or(children: Sequence[Node]) -> Node:
    """``or`` of ``children``, with every ``Match`` of one column (equality, ``$in``, ``null``, ``$exists:
    false``) merged into one, every compound equality on one set of columns merged into one ``RowMatch``,
    each at the first one's place, and ``or``s in it flattened.

    A ``Match`` is itself "one of these values, or missing", so the union of two is exact, whatever they
    hold (NULL and positive/negative context included). Why: ``{"$or": [{"a": "1"}, {"a": "2"}, …]}``
    compiled to one ``a = ?`` each, whose analysis is quadratic in SQLite (16,000 clauses: 13 s, 40,000:
    382 s; the same set as ``$in``: 0.1 s), and which bound a parameter each, past PostgreSQL's 65,535.
    Merged, it is the ``$in`` it means (one array parameter when long, :func:`_member_sql`).

    Likewise ``{"$or": [{"a": "0", "b": "0"}, {"a": "3", "b": "3"}, …]}``, a list of composite keys, was an
    OR of ANDs every row evaluated in full (SQLite, 200,000 rows: 1,000 clauses 12 s, 4,000 47 s; 16,000
    bound 32,000 values, a 400): merged, it is ``(a, b) IN (…)``, one lookup a row (:func:`_rows_sql`)."""
    nodes: list[Node] = []
    for child in children:
        nodes.extend(child.children if isinstance(child, Op) and child.kind == "or" else (child,))
    values: dict[str, dict[str, None]] = {}  # by column, dicts: a tuple grown per clause is quadratic again
    missing: dict[str, bool] = {}
    keys: dict[tuple[str, ...], dict[tuple[str, ...], None]] = {}  # by column set, as for values
    firsts: dict[tuple[str, ...], Node] = {}
    merged: list[Node | str | tuple[str, ...]] = []  # a column's name (a column set) stands where its merge goes
    for node in nodes:
        key = _compound_key(node)
        if key is not None:
            names, row = key
            if names not in keys:
                keys[names], firsts[names] = {}, node
                merged.append(names)
            keys[names][row] = None
            continue
        if not isinstance(node, Match):
            merged.append(node)
            continue
        if node.column not in values:
            values[node.column], missing[node.column] = {}, False
            merged.append(node.column)
        values[node.column].update(dict.fromkeys(node.values))
        missing[node.column] = missing[node.column] or node.missing
    out: list[Node] = []
    for n in merged:
        if isinstance(n, str):
            out.append(Match(n, tuple(values[n]), missing[n]))
        elif isinstance(n, tuple):  # one key alone stays the AND it was: nothing to look up
            out.append(RowMatch(n, tuple(keys[n])) if len(keys[n]) > 1 else firsts[n])
        else:
            out.append(n)
    return out[0] if len(out) == 1 else Op("or", tuple(out))


def _compound_key(node: Node) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """``(columns, values)``, columns in name order, when ``node`` is an ``and`` of equalities to one string
    each on two or more columns (a composite key), else None: anything else (``null``, ``$exists``, an
    ``$in`` of several values, another operator, one column asked two values) keeps its own SQL."""
    if not (isinstance(node, Op) and node.kind == "and"):
        return None
    found: dict[str, str] = {}
    todo = list(node.children)
    while todo:  # a loop: nested $and may go as deep as the JSON does
        leaf = todo.pop()
        if isinstance(leaf, Op) and leaf.kind == "and":
            todo.extend(leaf.children)
        elif not (isinstance(leaf, Match) and len(leaf.values) == 1 and not leaf.missing
                  and found.setdefault(leaf.column, leaf.values[0]) == leaf.values[0]):
            return None
    if len(found) < 2:
        return None
    names = tuple(sorted(found))
    return names, tuple(found[n] for n in names)


def _parse_field(column: str, value: Any, path: str) -> Node:
    if isinstance(value, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in value):
        return _parse_operators(column, value, path)
    return _equals(column, value, path)


def _parse_operators(column: str, ops: Mapping[str, Any], path: str) -> Node:
    """``{"$gt": "a", "$lt": "m"}``: every operator must hold (an implicit AND)."""
    names = [k for k in ops if not (isinstance(k, str) and k.startswith("$"))]
    if names:
        raise InvalidInput(path, f"cannot mix operators and field names ({names[0]!r}) in one document")
    if "$options" in ops and "$regex" not in ops:
        raise InvalidInput(f"{path}.$options", "$options needs $regex")
    clauses: list[Node] = []
    for op, operand in ops.items():
        where = f"{path}.{op}"
        if op not in FIELD_OPERATORS:
            raise InvalidInput(where, _operator_problem(op, top_level=False))
        if op == "$options":
            continue  # read together with $regex
        if op == "$eq":
            clauses.append(_equals(column, operand, where))
        elif op == "$ne":
            clauses.append(_not(_equals(column, operand, where)))
        elif op in COMPARISONS:
            clauses.append(_compare(column, op, operand, where))
        elif op in ("$in", "$nin"):
            member = _member(column, op, operand, where)
            clauses.append(member if op == "$in" else _not(member))
        elif op == "$exists":
            if not isinstance(operand, bool | NUMBER):
                raise InvalidInput(where, f"$exists needs a boolean (or a number, 0 for false), got {_kind(operand)}")
            missing = Match(column, (), missing=True)
            clauses.append(_not(missing) if operand else missing)
        elif op == "$regex":
            clauses.append(_regex(column, operand, ops.get("$options", ""), where))
        else:  # $not
            if not isinstance(operand, Mapping) or not operand:
                raise InvalidInput(where, "$not needs a non-empty document of operators (or a $regex)")
            if not all(isinstance(k, str) and k.startswith("$") for k in operand):
                raise InvalidInput(where, "$not needs a document of operators, not field names")
            clauses.append(_not(_parse_operators(column, operand, where)))
    return _and(clauses)


def _scalar(operand: Any, where: str, op: str) -> None:
    if isinstance(operand, Mapping):
        raise InvalidInput(where, f"{op} does not accept an embedded document (rows are flat)")
    if isinstance(operand, list | tuple):
        raise InvalidInput(where, f"{op} does not accept an array (rows are flat)")
    if not (operand is None or isinstance(operand, str | bool | NUMBER)):
        raise InvalidInput(where, f"{op} does not accept {_kind(operand)}")


def _equals(column: str, operand: Any, where: str) -> Node:
    _scalar(operand, where, "equality")
    if operand is None:
        return Match(column, (), missing=True)
    if isinstance(operand, str):
        return Match(column, (operand,))
    return FALSE  # a number or boolean never equals a stored string (type bracketing)


def _compare(column: str, op: str, operand: Any, where: str) -> Node:
    _scalar(operand, where, op)
    if operand is None:
        raise InvalidInput(where, f"{op} does not accept null (MongoDB engines disagree on its meaning)")
    if isinstance(operand, str):
        return Compare(column, COMPARISONS[op], operand)
    return FALSE  # numbers and booleans only compare with their own type, and stored values are strings


def _member(column: str, op: str, operand: Any, where: str) -> Node:
    if not isinstance(operand, list):
        raise InvalidInput(where, f"{op} needs an array")
    for i, item in enumerate(operand):
        if isinstance(item, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in item):
            raise InvalidInput(f"{where}[{i}]", f"cannot nest operators under {op}")
        _scalar(item, f"{where}[{i}]", op)
    strings = tuple(dict.fromkeys(v for v in operand if isinstance(v, str)))
    missing = any(v is None for v in operand)
    return Match(column, strings, missing) if strings or missing else FALSE


def _regex(column: str, pattern: Any, options: Any, where: str) -> Node:
    if not isinstance(pattern, str):
        raise InvalidInput(where, f"$regex needs a string pattern, got {_kind(pattern)}")
    if not isinstance(options, str) or any(c not in REGEX_OPTIONS for c in options):
        raise InvalidInput(where.rsplit(".", 1)[0] + ".$options",
                           f"$options must be letters from 'imsx', got {options!r}")
    node = Regex(column, pattern, "".join(sorted(set(options))))
    try:
        node.compiled  # noqa: B018  (validate now, before any SQL runs)
    except re.error as exc:
        raise InvalidInput(where, f"invalid regular expression: {exc}") from None
    return node


def _operator_problem(op: str, *, top_level: bool) -> str:
    if op in UNSUPPORTED or (top_level and op in FIELD_OPERATORS) or (not top_level and op in LOGICAL_OPERATORS):
        where = "at the top level" if top_level else "on a field"
        return f"operator {op} is not supported {where}"
    return f"unknown {'top level ' if top_level else ''}operator {op}"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {str: "a string", bool: "a boolean", int: "a number", float: "a number", Decimal: "a number",
            list: "an array", dict: "an object"}.get(type(value), type(value).__name__)


# -- compiling -----------------------------------------------------------------------------------
RegexMatcher = Callable[[sa.ColumnElement, Regex], sa.ColumnElement[bool]]


def compile_filter(flt: Mapping[str, Any], columns: Mapping[str, sa.ColumnElement], *, field: str = "query",
                   dialect: str = "sqlite", conn: sa.Connection | None = None) -> sa.ColumnElement[bool]:
    """One SQL boolean expression selecting the rows that match the MongoDB filter ``flt``.

    ``columns`` maps user column names to SQL columns (``VirtualFileInfo.column_map``). On PostgreSQL a
    filter with ``$regex`` needs ``conn`` (the transaction the expression will run in). An operand may hold
    a NUL where a stored value may (SQLite, as a pushed file's); on PostgreSQL it is a 400 naming it, here,
    where every filter passes, so no action that takes a filter has to remember it.
    """
    tree = parse_filter(flt, field)  # first: a NUL in a key is refused on both databases, in the same words
    if dialect == "postgresql":
        refuse_nul_for_postgres(flt, field)
    long_in = _list_threshold(tree, field)
    regex = _regex_matcher(dialect, conn, tree, columns)
    return _to_sql(tree, columns, exact=False, dialect=dialect, regex=regex, long_in=long_in)


def _list_threshold(tree: Node, field: str) -> int:
    """The longest ``$in`` list :func:`_member_sql` may bind value by value: ``LONG_IN``, or 1 when that
    would bind more than ``MAX_PARAMETERS`` values in all (each list is then one array parameter). A
    filter needing more even so (tens of thousands of clauses on several columns) is an ``InvalidInput``
    naming ``field`` — it was a 500 "database error" (``$or`` of 700 × ``$in`` of 100 values: PostgreSQL
    takes 65,535 parameters a statement; 2,600 of them: SQLite 250,000 here, 32,766 in its default build)."""
    for long_in in (LONG_IN, 1):
        needed = _parameters(tree, long_in)
        if needed <= MAX_PARAMETERS:
            return long_in
    raise InvalidInput(field, f"the filter needs {needed:,} bound values, more than the {MAX_PARAMETERS:,} one "
                              "filter may use (the databases limit a statement's parameters): merge clauses "
                              "into $in lists, which count once, or split the work into several calls")


def _parameters(tree: Node, long_in: int) -> int:
    """How many values :func:`_to_sql` binds for ``tree`` (at most: a column the file lacks binds none),
    lists longer than ``long_in`` being one array each. A loop, not recursion: an ``or`` may have 70,000
    children."""
    count, todo = 0, [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, Op):
            todo.extend(node.children)
        elif isinstance(node, Match):
            n = len(node.values)
            count += n if n <= long_in else 1
        elif isinstance(node, RowMatch):
            n, width = len(node.rows), len(node.columns)
            count += n * width if n <= long_in else width  # one array a column on PostgreSQL, one JSON on SQLite
        elif isinstance(node, Compare):
            count += 1
        elif isinstance(node, Regex):
            count += 2  # SQLite: the finder's key and the 1 it is compared with; PostgreSQL: none
    return count


def equality_columns(flt: Mapping[str, Any]) -> list[str]:
    """The columns an index would serve (top-level positive equality / ``$in``), in the filter's order."""
    tree = parse_filter(flt, "query")
    top = tree.children if isinstance(tree, Op) and tree.kind == "and" else (tree,)
    names = [n.column for n in top if isinstance(n, Match) and n.values and not n.missing]
    return list(dict.fromkeys(names))


def _to_sql(node: Node, columns: Mapping[str, sa.ColumnElement], *, exact: bool, dialect: str,
            regex: RegexMatcher, long_in: int) -> sa.ColumnElement[bool]:
    """``exact``: the result must be TRUE/FALSE, never NULL (we are under a NOT); ``long_in``: as
    :func:`_member_sql` takes it."""
    if isinstance(node, Const):
        return sa.true() if node.value else sa.false()
    if isinstance(node, Op):
        if node.kind == "not":
            return sa.not_(_to_sql(node.children[0], columns, exact=True, dialect=dialect, regex=regex,
                                   long_in=long_in))
        parts = [_to_sql(c, columns, exact=exact, dialect=dialect, regex=regex, long_in=long_in)
                 for c in node.children]
        return balanced(sa.and_ if node.kind == "and" else sa.or_, parts)
    if isinstance(node, RowMatch):
        if any(name not in columns for name in node.columns):  # missing in every row: no key matches
            return sa.false()
        keyed = [columns[name] for name in node.columns]
        member = _rows_sql(keyed, node.rows, dialect, long_in)
        return sa.and_(*(c.is_not(None) for c in keyed), member) if exact else member
    column = columns.get(node.column)
    if column is None:  # the virtual file has no such column: it is missing in every row
        return sa.true() if isinstance(node, Match) and node.missing else sa.false()
    if isinstance(node, Regex):
        return regex(column, node)
    leaf: sa.ColumnElement[bool]  # a comparison here, a membership test below
    if isinstance(node, Compare):
        left = sa.collate(column, "C") if dialect == "postgresql" else column
        leaf = left.op(node.op, is_comparison=True)(sa.bindparam(None, node.value, type_=sa.Text))
        return sa.and_(column.is_not(None), leaf) if exact else leaf
    clauses: list[sa.ColumnElement[bool]] = []
    if node.values:
        leaf = _member_sql(column, node.values, dialect, long_in)
        clauses.append(sa.and_(column.is_not(None), leaf) if exact else leaf)
    if node.missing:
        clauses.append(column.is_(None))
    return sa.or_(*clauses)


def _member_sql(column: sa.ColumnElement, values: tuple[str, ...], dialect: str,
                long_in: int) -> sa.ColumnElement[bool]:
    """``column`` equals one of ``values``; a list longer than ``long_in`` is one array parameter (drivers
    cap parameters, see ``MAX_PARAMETERS``), still served by an index."""
    if len(values) == 1:
        return column == values[0]
    if len(values) <= long_in:
        return column.in_(values)
    if dialect == "postgresql":
        return column == sa.any_(_text_array(values))
    listed, hexed = _json_text(values)
    value: sa.ColumnElement = _unhexed(sa.column("value", sa.Text), hexed)
    return column.in_(sa.select(value).select_from(sa.func.json_each(listed)))


def _rows_sql(columns: Sequence[sa.ColumnElement], rows: tuple[tuple[str, ...], ...], dialect: str,
              long_in: int) -> sa.ColumnElement[bool]:
    """``(c1, c2, …) IN (…)``: the columns' values are one of ``rows``. Equality as :func:`_member_sql`'s
    (the columns' own collation: BINARY on SQLite, the database's deterministic one on PostgreSQL). Both
    databases hash the list once and probe it a row (SQLite an ephemeral index, PostgreSQL a hash
    semi-join), where an OR of ANDs compared every row with every key. ``long_in`` as :func:`_member_sql`
    takes it: a longer list is one ``text[]`` a column on PostgreSQL (``unnest``), one JSON array of arrays
    on SQLite (``json_each``)."""
    keyed = sa.tuple_(*columns)
    names = [f"k{i}" for i in range(len(columns))]
    if dialect == "postgresql":
        if len(rows) <= long_in:  # a VALUES list: IN ((…), (…)) would be planned as an OR of ANDs again
            listed = sa.values(*(sa.column(n, sa.Text) for n in names), name="keys").data(list(rows))
            return keyed.in_(sa.select(*listed.c))
        arrays = (_text_array(column) for column in zip(*rows, strict=True))
        unnested = sa.func.unnest(*arrays).table_valued(*names).render_derived()
        return keyed.in_(sa.select(*unnested.c))
    if len(rows) <= long_in:
        return keyed.in_(rows)  # SQLite: (…) IN (VALUES (?, ?), …)
    # SQLite takes json_each for a few rows: given an index on one of the columns (a Query on it builds one), it
    # searched that index key by key, each search reading every row of that value (4,000 keys of (id, city)
    # over 1M rows: 1.6 s where the scan probing the list takes 0.25 s). ``+column`` keeps the column's
    # collation (SQLite: "a column name preceded by unary + … is still considered a column name") and no index
    keyed = sa.tuple_(*(UnaryExpression(c, operator=custom_op("+"), type_=c.type) for c in columns))
    flat, hexed = _json_text(tuple(itertools.chain.from_iterable(rows)), len(columns))
    value = sa.column("value", sa.Text)
    # the paths as literals, not parameters: what _parameters counts (the JSON alone) is what is bound
    parts = (_unhexed(sa.func.json_extract(value, sa.literal_column(f"'$[{i}]'")), hexed)
             for i in range(len(columns)))
    return keyed.in_(sa.select(*parts).select_from(sa.func.json_each(flat)))


def _text_array(values: Sequence[str]) -> sa.BindParameter[Any]:
    """``values`` as one ``text[]`` parameter (PostgreSQL)."""
    from sqlalchemy.dialects.postgresql import ARRAY

    return sa.bindparam(None, list(values), type_=ARRAY(sa.Text))


def _json_text(values: tuple[str, ...], width: int = 0) -> tuple[sa.BindParameter[str], bool]:
    """``values`` as one JSON array parameter for SQLite's ``json_each`` (in arrays of ``width`` when given),
    and whether they went as hex: SQLite's JSON functions end a text at a NUL, so a list holding one goes as
    hex, read back by :func:`_unhexed`."""
    import json

    hexed = any("\x00" in v for v in values)
    if hexed:
        values = tuple(v.encode().hex() for v in values)
    listed: Sequence[Any] = [values[i:i + width] for i in range(0, len(values), width)] if width else values
    return sa.bindparam(None, json.dumps(listed), type_=sa.Text), hexed


def _unhexed(value: sa.ColumnElement, hexed: bool) -> sa.ColumnElement:
    return sa.func.cop_unhex(value) if hexed else value


class _Parens(sa.sql.expression.ColumnElement[Any]):
    """An expression in parentheses that SQLAlchemy will not flatten into its parent AND/OR (or ``||``);
    of the inner expression's type."""

    inherit_cache = True
    type: sa.types.TypeEngine[Any] = sa.Boolean()
    _traverse_internals = [("inner", InternalTraversal.dp_clauseelement)]  # part of the statement cache key

    def __init__(self, inner: sa.ColumnElement[Any]) -> None:
        self.inner = inner
        self.type = inner.type


@compiles(_Parens)
def _render_parens(element: _Parens, compiler: Any, **kw: Any) -> str:
    return f"({compiler.process(element.inner, **kw)})"


def balanced(combine: Callable[..., sa.ColumnElement[Any]], parts: Sequence[sa.ColumnElement[Any]]
             ) -> sa.ColumnElement[Any]:
    """``combine(*parts)`` as a tree of at most ``FAN_OUT`` children a node: SQLite parses a flat
    ``a OR b OR …`` of 3,000 terms 3,000 levels deep, past its expression depth limit (1,000), and a
    left-deep chain (Validate's ``a || b || …`` over a row's columns) runs SQLite's parser stack over and
    SQLAlchemy's compiler past Python's recursion limit. ``combine`` must be associative."""
    while len(parts) > FAN_OUT:
        parts = [_Parens(combine(*parts[i:i + FAN_OUT])) for i in range(0, len(parts), FAN_OUT)]
    return combine(*parts)


# -- $regex on each database ---------------------------------------------------------------------
#: each live finder of a ``$regex`` leaf, by the key SQLite statements pass to ``cop_regexp`` (the finder's
#: ``id``): held by a statement (:class:`_HoldsFinder`) or by ``_finder``'s cache, it goes when both let go,
#: so the entries are at most the cache's 256 plus the patterns of the statements that exist now
_LIVE_FINDERS: weakref.WeakValueDictionary[str, Callable[[str], bool]] = weakref.WeakValueDictionary()


def _sqlite_regexp(key: str, value: str | None) -> int:
    """The SQLite UDF: 1 when ``value`` is a string the leaf's pattern finds, else 0 (never NULL)."""
    return 1 if isinstance(value, str) and _LIVE_FINDERS[key](value) else 0


SQLITE_FUNCTIONS["cop_regexp"] = (2, _sqlite_regexp)
#: a long ``$in`` list's value from its hex (:func:`_member_sql`; SQLite 3.40 has no ``unhex``)
SQLITE_FUNCTIONS["cop_unhex"] = (1, lambda text: bytes.fromhex(text).decode())


class _HoldsFinder(_Parens):
    """A ``$regex`` leaf's SQL that keeps its finder alive as long as the statement is, so the UDF finds it
    by key. The UDF once took the pattern and looked its finder up in ``_finder``'s cache of 256, per row:
    a filter of 260 patterns evicted each before its next use and compiled every one for every row (200
    rows: 14 s, against 0.76 s for 250). Now each pattern is compiled once per statement, whatever their
    number, and nothing outlives the statements but that bounded cache."""

    inherit_cache = True  # the finder is not part of the SQL

    def __init__(self, inner: sa.ColumnElement[bool], finder: Callable[[str], bool]) -> None:
        super().__init__(inner)
        self.finder = finder


def _finder_key(finder: Callable[[str], bool]) -> str:
    """The key ``cop_regexp`` finds ``finder`` by: one per finder, not per statement. A new key per call
    (a counter) left an entry for every Query ever run, as the cached finder outlived each statement
    (a loop of one $regex Query: 170 MB per million). An ``id`` is only reused once its finder is gone,
    and with it its entry."""
    key = f"{id(finder):x}"
    _LIVE_FINDERS[key] = finder
    return key


def _sqlite_regex(column: sa.ColumnElement, node: Regex) -> sa.ColumnElement[bool]:
    finder = node.found
    key = _finder_key(finder)
    return _HoldsFinder(sa.func.cop_regexp(key, column) == 1, finder)


def _regex_matcher(dialect: str, conn: sa.Connection | None, tree: Node,
                   columns: Mapping[str, sa.ColumnElement]) -> RegexMatcher:
    """How ``tree``'s ``$regex`` leaves on ``columns`` compile on ``dialect``."""
    if dialect == "sqlite":
        return _sqlite_regex
    return _PythonRegexSeqs(conn, _regex_leaves(tree), columns)


class _PythonRegexSeqs:
    """PostgreSQL: evaluate the ``$regex`` leaves in Python (with RE2, as on SQLite, see :func:`_finder`) and
    refer to the matches by ``seq``.

    PostgreSQL's regular expressions (ARE) differ from Python's and MongoDB's (``.`` matches a newline,
    ``^``/``$`` ignore lines, ``\\b`` is a backspace), so translating patterns would change results. Every
    leaf of the filter is found at the first one's compiling, in ONE read of the columns they name (one
    server-side cursor), into ONE temporary table (dropped at commit) of ``(leaf, seq)``; a leaf becomes
    ``EXISTS`` of the row's ``seq`` under its number there, two-valued by nature. A table and a scan per
    leaf, as it once was, took a lock per table: an ``$or`` of 5,000 patterns filled the server's shared
    lock table (a 500 after ≈ 50 s, while other sessions could not lock either).
    """

    def __init__(self, conn: sa.Connection | None, leaves: Sequence[Regex],
                 columns: Mapping[str, sa.ColumnElement]) -> None:
        self.conn = conn
        self.columns = columns
        #: each distinct (column, pattern, options) of the filter, by its number in the table
        self.leaf_ids = {key: i for i, key in enumerate(dict.fromkeys(_regex_key(n) for n in leaves))}
        self.matches: sa.Table | None = None

    def __call__(self, column: sa.ColumnElement, node: Regex) -> sa.ColumnElement[bool]:
        if self.conn is None:
            raise ValueError("a $regex filter on PostgreSQL needs the connection it will run in")
        table = column.table
        if self.matches is None:
            self.matches = self._materialise(table)
        matches = self.matches
        # EXISTS, not IN: under $or/$not PostgreSQL keeps either as a subplan, and once the matches outgrow
        # work_mem an IN scans all of them for every row (30k rows: 27 s), where EXISTS probes their key
        found = sa.select(sa.literal(1)).where((matches.c.leaf == self.leaf_ids[_regex_key(node)])
                                               & (matches.c.seq == table.c.seq))
        if len(self.leaf_ids) > JOINED_REGEX_LEAVES:
            # an OFFSET keeps PostgreSQL from making each EXISTS of an $and a semi-join: it planned the join
            # order of them all, in time growing as the cube of the leaves (150 on a 2-row file: 20 s); a
            # fenced one is a subplan, a probe of the matches' key per row and leaf
            found = found.offset(0)
        return sa.exists(found)

    def _materialise(self, table: sa.Table) -> sa.Table:
        from sqlalchemy.dialects import postgresql  # only the dialect in use is imported

        conn = self.conn
        assert conn is not None
        matches = sa.Table(f"cop_rx_{uuid.uuid4().hex}", sa.MetaData(),
                           sa.Column("leaf", sa.Integer, primary_key=True),
                           sa.Column("seq", sa.BigInteger, primary_key=True),
                           prefixes=["TEMPORARY"], postgresql_on_commit="DROP")
        matches.create(conn)
        room_to_hash_keys(conn)  # the query probing them: 4M rows, 448k matches, 11.0 s → 8.3 s
        by_column: dict[str, list[tuple[int, Callable[[str], bool]]]] = {}
        for (name, pattern, options), leaf in self.leaf_ids.items():
            if name in self.columns:  # a leaf whose column the file lacks is never compiled
                by_column.setdefault(name, []).append((leaf, _finder(pattern, options)))
        columns = [self.columns[name] for name in by_column]
        finders = list(by_column.values())
        leaves: list[int] = []
        seqs: list[int] = []

        def store() -> None:  # one statement a batch (an executemany of 111k rows took 4 s)
            pairs = sa.func.unnest(sa.bindparam("leaves", leaves, type_=postgresql.ARRAY(sa.Integer)),
                                   sa.bindparam("seqs", seqs, type_=postgresql.ARRAY(sa.BigInteger)),
                                   ).table_valued("leaf", "seq").render_derived()
            conn.execute(sa.insert(matches).from_select(["leaf", "seq"], sa.select(pairs.c.leaf, pairs.c.seq)))
            leaves.clear()
            seqs.clear()

        # one server-side cursor, in no order (keyset pages of SQLAlchemy rows took 2.6 s for 1M values;
        # this, 1.4 s), and the driver's own tuples; a batch is judged a leaf at a time, by a comprehension
        # (a loop over each row's values and leaves cost the benchmark's one-leaf Query 1.13 → 1.58× raw)
        query = sa.select(table.c.seq, *columns).where(sa.or_(*(c.is_not(None) for c in columns)))
        for rows in stream(conn, query, REGEX_BATCH):
            for position, column_finders in enumerate(finders, start=1):
                for leaf, found in column_finders:
                    hits = [row[0] for row in rows if (value := row[position]) is not None and found(value)]
                    leaves.extend(itertools.repeat(leaf, len(hits)))
                    seqs.extend(hits)
                    if len(leaves) >= REGEX_BATCH:  # memory bounded however many leaves match
                        store()
        if leaves:
            store()
        # the leaves' numbers in the planner's statistics: unanalysed, ``leaf = ?`` looked like 0.5 % of any
        # table, so it hashed a leaf's 20,000 matches in a 64 kB work_mem instead of probing their key
        conn.exec_driver_sql(f"ANALYZE {conn.dialect.identifier_preparer.quote(matches.name)}")
        return matches


def _regex_key(node: Regex) -> tuple[str, str, str]:
    return node.column, node.pattern, node.options


def _regex_leaves(tree: Node) -> list[Regex]:
    """The ``$regex`` leaves of ``tree``, in no particular order (a loop: an ``or`` may be very wide)."""
    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, Op):
            todo.extend(node.children)
        elif isinstance(node, Regex):
            found.append(node)
    return found


# -- likely mistakes -----------------------------------------------------------------------------
def filter_warnings(flt: Mapping[str, Any], columns: Sequence[str], field: str = "query") -> list[str]:
    """What in a (valid) filter probably does not mean what its author thinks, in users' words.

    MongoDB's semantics are kept — a column the file lacks is missing in every row, and a number never
    equals or compares with stored text — but both silently select nothing (or, under ``$ne``/``$nin``,
    everything), which has cost users whole files in Delete Rows. The caller shows these lines. A ``$not``
    or ``$nor`` around such a clause turns "no row" into "every row" (and back), so the line says both what
    the clause selects and what its negation does: "selects no row" alone, for ``{"$nor": [{"n": 0}]}``,
    read as harmless in a Delete Rows that deletes every row."""
    known = set(columns)
    unknown: dict[str, None] = {}
    numbers: list[str] = []

    def walk(doc: Mapping[str, Any], path: str, negations: tuple[str, ...]) -> None:
        for key, value in doc.items():
            if key in LOGICAL_OPERATORS and isinstance(value, list):
                inner = (*negations, key) if key == "$nor" else negations
                for i, sub in enumerate(value):
                    if isinstance(sub, Mapping):
                        walk(sub, f"{path}.{key}[{i}]", inner)
            elif not key.startswith("$"):
                if key not in known:
                    unknown[key] = None
                operand(value, f"{path}.{key}", negations)

    def operand(value: Any, path: str, negations: tuple[str, ...]) -> None:
        if isinstance(value, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in value):
            for op, v in value.items():
                if op == "$not":
                    operand(v, f"{path}.$not", (*negations, "$not"))
                elif op in ("$in", "$nin") and isinstance(v, list):
                    for item in v:
                        if _is_number(item):
                            numbers.append(
                                f"{path}.{op}: {_literal(item)} is {_kind(item)}{_number_tail(op, negations)}")
                            break
                elif op in ("$eq", "$ne", *COMPARISONS) and _is_number(v):
                    numbers.append(f"{path}.{op}: {_literal(v)} is {_kind(v)}{_number_tail(op, negations)}")
        elif _is_number(value):
            numbers.append(f"{path}: {_literal(value)} is {_kind(value)}{_number_tail('$eq', negations)}")

    walk(flt, field, ())
    found = []
    if unknown:
        shown = ", ".join(repr(c) for c in columns[:20]) + (", …" if len(columns) > 20 else "")
        names = ", ".join(repr(c) for c in unknown)
        found.append(f"{field}: no column {names} in this virtual file, so it is missing in every row "
                     f"(its columns: {shown or 'none'})")
    found.extend(numbers)
    return found


def _is_number(value: Any) -> bool:
    return isinstance(value, bool | NUMBER)


def _literal(value: Any) -> str:
    """A number as its caller wrote it: a ``Decimal`` (read from JSON text) with its digits, not its repr."""
    return str(value) if isinstance(value, Decimal) else repr(value)


def _number_tail(op: str, negations: Sequence[str] = ()) -> str:
    """The rest of a number's line: what the clause selects, and, under ``negations`` (the ``$not`` and
    ``$nor`` around it, outermost first), what it selects once they negate it."""
    selects_none = op not in ("$ne", "$nin")
    selects = _rows(selects_none)
    if negations:
        times = {1: "", 2: "twice "}.get(len(negations), f"{len(negations)} times ")
        ops = " and ".join(negations) if len(negations) <= 2 else f"{', '.join(negations[:-1])} and {negations[-1]}"
        selects += f", and, negated {times}by the {ops} around it, {_rows(selects_none == (len(negations) % 2 == 0))}"
    return (f", but stored values are text, so this selects {selects} (MongoDB type bracketing); "
            f"write the value as a string to compare text (in code-point order for $gt/$lt)")


def _rows(none: bool) -> str:
    return "no row" if none else "every row"
