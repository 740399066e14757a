"""``%pipeline record``: a notebook session becomes a YAML pipeline, without rewriting it.

While recording, every successful ``%etl``/``%drive``/``%mail`` call becomes a step with the call's input
(after ``{{…}}`` substitution). Inputs that came from an earlier call's output — through ``-o``, a
``{{var}}`` or a value the cell returned — are recognised by *value*: the output fields the actions'
output models mark :data:`~connector_ops.kernel.platform_file.REFERABLE` (ids, platform-file
descriptors, row lists) are indexed — nothing inside them, so a row's data never is — and an input value
equal to one of them becomes ``${step.field}`` (a long id inside a longer string becomes an
interpolation, ``"report-${load.virtualFileId}.csv"``). Where two steps' outputs hold the value, the
reference the cell's own ``{{name.field}}`` wrote is taken (:attr:`MagicCall.placeholders`); without one
the value stays a literal, with a ``# check:`` comment — never a guess. A file stored with
``%connectors add-file`` becomes ``${file:path}``. ``%etl push --df FRAME`` becomes a Push of a snapshot:
the rows the push stored, pulled (the same Pull action the magic runs) to a JSON platform file when the
cell ran — a pipeline cannot recompute a DataFrame — and written beside the exported YAML (:class:`Snapshot`).
Everything else stays a literal, even when an earlier
output happens to hold the same value (a row's ``id`` column is data). An id a pipeline cannot refer to
stays the notebook's value, with a ``# check:`` comment in the file.

Every successful call is remembered from the session's start (:class:`_Past`: its input, on disk past a few
KiB, and its output's ids): a recorded step using an id made by a call that is no step (run before
``%pipeline record``, or while it was stopped) brings that call in as a step, in the session's order, with
the calls that changed the file since (:data:`CHANGES_ITS_INPUT`) — a run must make its own file, not act
on the session's by its id. A maker a pipeline cannot repeat (a pushed DataFrame never snapshotted) is one
of :attr:`Recorder.problems`, which
stop the export.

Steps keep the notebook's order (each names the previous one in ``after`` unless it already refers to
it), so a run does what the cells did even where the actions have side effects (Delete Rows, Append
Rows, Map with overwrite, Clean). Step ids come from ``-o`` names, else the action (``query``,
``query_2``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import functools
import hashlib
import json
import os
import pickle
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import yaml

from connector_ops.frames import run_with_store
from connector_ops.kernel.atomic import atomic_write
from connector_ops.kernel.errors import ConnectorError, ConnectorOpsError
from connector_ops.kernel.platform_file import REFERABLE
from connector_ops.kernel.yaml_text import YAML_BREAKS
from connector_ops.magic import MagicCall
from connector_ops.magic_input import jsonable
from connector_ops.pipelines.dsl.names import RESERVED_NAMES
from connector_ops.pipelines.dsl.references import RESERVED_ROOTS
from connector_ops.registry import get_action, run_action

#: an id this long is also recognised inside a longer string
MIN_EMBEDDED = 16
_PATH_PART = re.compile(r"""\.(\w+)|\[\s*(\d+|"[^"]*"|'[^']*')\s*\]""")
_OUTPUT_PATH = re.compile(rf"([A-Za-z_]\w*)((?:{_PATH_PART.pattern})*)")
_ID_CHARS = re.compile(r"[^A-Za-z0-9_]+")


#: actions that change the virtual file they are given (its rows, or Iterate's cursor): a cell run before
#: recording that did so to a file a recorded step uses is brought into the pipeline with the cell that made it
CHANGES_ITS_INPUT = frozenset({"etl.delete_rows", "etl.append_rows", "etl.clean", "etl.iterate"})


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=jsonable, ensure_ascii=False)


def _values(value: Any) -> Iterator[str]:
    """The canonical JSON of ``value`` and of every dict, list and string inside it."""
    yield _key(value)
    if isinstance(value, dict):
        for v in value.values():
            yield from _values(v)
    elif isinstance(value, list):
        for v in value:
            yield from _values(v)


@dataclass
class _Made:
    """Every id and descriptor the session's calls output (:attr:`_Past.makes`), and which of them an input
    holds: :func:`_values` restricted to strings equal to an id and dicts shaped like a descriptor, so that
    the canonical JSON of each row of 80,000 inline rows is not written (6 s a cell)."""

    keys: set[str] = field(default_factory=set)
    strings: set[str] = field(default_factory=set)
    shapes: set[frozenset[str]] = field(default_factory=set)

    def add(self, values: Iterable[Any]) -> None:
        for value in values:
            self.keys.add(_key(value))
            if isinstance(value, str):
                self.strings.add(value)
            elif isinstance(value, dict):
                self.shapes.add(frozenset(value))

    def held(self, value: Any) -> frozenset[str]:
        """The canonical JSON of each id and descriptor inside ``value`` (a loop, not a recursion: a few
        hundred thousand values a cell)."""
        strings: set[str] = set()
        found: set[str] = set()
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                if item in self.strings:
                    strings.add(item)
            elif isinstance(item, dict):
                if self.shapes and frozenset(item) in self.shapes and (key := _key(item)) in self.keys:
                    found.add(key)
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
        return frozenset(found | {_key(s) for s in strings})


#: a call's pickled size from which :class:`_Kept` writes it to its file, not memory
KEPT_IN_MEMORY = 4096


class _Kept:
    """The calls of :class:`_Past`, kept for as long as the session, in an anonymous temporary file past a few
    KiB each: an input of 80,000 inline rows (``{"rows": {{rows}}}``) held +100 MiB per cell in memory until
    the kernel stopped, though the pipeline needs it only if a recorded step brings that cell in. Removed by
    the system when the session ends. A call pickle cannot write stays in memory."""

    def __init__(self) -> None:
        self._file: Any = None

    def keep(self, call: MagicCall) -> Callable[[], MagicCall]:
        """``call`` kept; a function that gives it back."""
        try:
            data = pickle.dumps(call, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # a value of {{…}} pickle cannot write: kept as it is
            return lambda: call
        if len(data) < KEPT_IN_MEMORY:
            return lambda: call
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="connector-ops-recorder-")  # noqa: SIM115 (the session's)
        offset = self._file.seek(0, os.SEEK_END)
        self._file.write(data)
        return functools.partial(self._load, offset, len(data))

    def _load(self, offset: int, size: int) -> MagicCall:
        self._file.seek(offset)
        return pickle.loads(self._file.read(size))  # our own file, written by keep


@dataclass(frozen=True)
class _Past:
    """A successful call, kept from the session's start whether or not it was recorded, so that a recorded
    step using what it made can bring it into the pipeline. Of its output only the referable ids and
    platform-file descriptors (``makes``): a row list a later cell passes on is data, which a literal
    reproduces. In memory only what the search for a maker reads (``makes``; ``used``, the ids and descriptors
    of earlier calls its input holds); the call itself through :class:`_Kept`, read back if it is brought in."""

    seq: int
    action: str
    df: Any
    makes: frozenset[str]
    used: frozenset[str]
    load: Callable[[], MagicCall]

    def holds(self, key: str) -> bool:
        return key in self.makes

    def uses(self, key: str) -> bool:
        return key in self.used


@functools.cache
def referable_fields(action: str) -> tuple[str, ...]:
    """The output fields of ``action`` (spec names) a later step may take as input: those its output
    model marks :data:`REFERABLE`."""
    model = get_action(action).output_model
    if model is None:
        return ()
    return tuple(f.alias or n for n, f in model.model_fields.items() if REFERABLE in f.metadata)


def _written_ref(expression: str, outs: Mapping[str, str]) -> str | None:
    """``load.virtualFileId`` / ``load["virtualFileId"]`` -> ``load.virtualFileId`` when ``load`` is a
    recorded step's ``-o`` name; None for any other ``{{expression}}``."""
    match = _OUTPUT_PATH.fullmatch(expression)
    if match is None or match.group(1) not in outs:
        return None
    keys = [name or index.strip("\"'") for name, index in _PATH_PART.findall(match.group(2))]
    return ".".join([outs[match.group(1)], *keys])


def step_id_for(name: str, taken: set[str]) -> str:
    """A valid, unused step id from an ``-o`` name or an action's short name: never a reference root
    (``env``, ``file``…) nor a name Dagster refuses for an op (``input``, ``output``, a Python keyword), which
    get ``_step`` — the cell's ``{{input.field}}`` still finds the step, through the ``-o`` name."""
    base = re.sub(r"_+", "_", _ID_CHARS.sub("_", name)).strip("_") or "step"
    if base[0].isdigit():
        base = f"step_{base}"
    if base in RESERVED_ROOTS or base in RESERVED_NAMES:
        base = f"{base}_step"
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}_{n}", n + 1
    return candidate


def pipeline_name_for(path: str | os.PathLike[str]) -> str:
    """``my-report.yaml`` -> ``my_report`` (a job name: letters, digits and _)."""
    return step_id_for(Path(path).stem, set())


class _Dumper(yaml.SafeDumper):
    """``yaml.SafeDumper`` whose every string loads back exactly: one holding a YAML line break other than
    ``\\n`` is double-quoted. PyYAML writes those raw in a single-quoted or plain scalar, where the loader
    folds them, but escapes them in double quotes (``\\N``, ``\\L``, ``\\P``); characters YAML refuses raw
    it double-quotes and escapes by itself."""

    def represent_str(self, data: str) -> yaml.ScalarNode:
        if YAML_BREAKS.isdisjoint(data):
            return super().represent_str(data)
        return self.represent_scalar("tag:yaml.org,2002:str", data, style='"')


_Dumper.add_representer(str, _Dumper.represent_str)


def _comment(text: str) -> str:
    """One comment line: a line break in a note (a key of the cell's JSON can hold one) would end the comment
    and put the rest of the note into the YAML; a lone surrogate would make the file unwritable as UTF-8."""
    return "# " + " ".join(text.splitlines()).encode("utf-8", "backslashreplace").decode("utf-8")


def _escape(text: str) -> str:
    return text.replace("${", "$${")


def data_dir_for(target: Path) -> str:
    """Where an export to ``target`` writes its snapshots, beside it: ``my-report.yaml`` -> ``my-report-data``."""
    return f"{target.stem}-data"


@dataclass(frozen=True)
class Snapshot:
    """The rows a ``%etl push --df`` stored, as Pull's JSON export (kept by the session's platform-file store
    until ``%pipeline export`` copies it to ``<data dir>/<file_name>``). JSON keeps every string exact and a
    missing value a missing key; the recorded Push's ``schema`` keeps the column order, which the keys of
    the rows alone would not (a column missing from the first rows would come last)."""

    platform_file: dict[str, Any]
    file_name: str

    @classmethod
    def take(cls, resources: Mapping[str, Any], vf_id: str, name: str) -> tuple[Snapshot, list[str]]:
        """Pull ``vf_id`` to ``name``; with its columns in order. Errors are the actions' (ConnectorError)."""
        columns = run_with_store("etl.pull", resources, lambda store: store.summary(vf_id, 0)[1])
        pulled = run_action(get_action("etl.pull"), {"virtualFileId": vf_id, "exportType": "json",
                                                     "exportName": name}, resources)
        return cls(pulled["platformFile"], name), columns

    def differs_from(self, files: Any, path: Path) -> bool:
        """``path`` exists and holds other bytes than the snapshot (a re-export of the same rows is fine)."""
        if not path.exists():
            return False
        with files.open(self.platform_file) as stored, path.open("rb") as existing:
            return hashlib.file_digest(stored, "sha256").digest() != hashlib.file_digest(existing, "sha256").digest()


@dataclass
class Recorder:
    """The steps recorded so far and the index of outputs they can be referred to by.

    ``resources`` gives the session's resources (the magics'), for the snapshot of a pushed DataFrame;
    without it such a push is not recorded."""

    active: bool = False
    resources: Callable[[], Mapping[str, Any]] | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # values left literal that came from an output
    _refs: dict[str, list[str]] = field(default_factory=dict)  # canonical JSON -> every reference to it
    _unreferable: dict[str, str] = field(default_factory=dict)  # canonical JSON -> why it cannot be one
    _files: dict[str, str] = field(default_factory=dict)  # a stored descriptor's JSON -> path?name=…&contentType=…
    _outs: dict[str, str] = field(default_factory=dict)  # -o name -> step id
    _named: dict[str, str] = field(default_factory=dict)  # canonical JSON -> the reference the cell wrote
    _snapshots: dict[str, Snapshot] = field(default_factory=dict)  # step id -> the rows its --df push stored
    problems: list[str] = field(default_factory=list)  # what keeps the pipeline from doing what the cells did
    _past: list[_Past] = field(default_factory=list)  # every successful call, from the session's start
    _made: _Made = field(default_factory=_Made)  # what they output
    _kept: _Kept = field(default_factory=_Kept)  # their calls
    _seq_of: dict[str, int] = field(default_factory=dict)  # step id -> its call's place in _past
    _added: dict[str, str] = field(default_factory=dict)  # step id of a call from before recording -> why
    _now: int = 0  # the place in _past of the call being recorded: only what came before it is referred to

    def start(self, new: bool = False) -> None:
        """Record from now on: after ``%pipeline record stop`` the kept steps go on (a resume), unless
        ``new`` starts an empty pipeline. Files added with ``%connectors add-file`` stay known either way:
        they are still in the store, and a later step may read them. Snapshots of dropped steps are
        forgotten (their files stay in the store, for ``connector-ops gc``)."""
        self.active = True
        if new:
            self.steps.clear()
            self.skipped.clear()
            self.notes.clear()
            self.problems.clear()
            self._seq_of.clear()
            self._added.clear()
            self._refs.clear()
            self._unreferable.clear()
            self._outs.clear()
            self._snapshots.clear()

    # -- listening ---------------------------------------------------------------------------------
    def __call__(self, call: MagicCall) -> None:
        if call.action == "files.add":  # also before %pipeline record: a recorded step may use the file
            if call.path:
                given = {k: v for k, v in (call.payload or {}).items() if v}  # --name, --content-type
                options = urlencode(given, quote_via=quote, safe="/")  # as ${file:path?name=…&contentType=…} reads them
                self._files[_key(call.output)] = f"{call.path}?{options}" if options else call.path
            return
        seq = self._remember(call)
        if self.active:
            self._record(call, seq)

    def _remember(self, call: MagicCall) -> int:
        """Keep ``call`` in :attr:`_past`, of its output only the ids and descriptors; its place there."""
        output = json.loads(_key(call.output)) if isinstance(call.output, Mapping) else {}  # not a DataFrame
        kept = {name: v for name in referable_fields(call.action)
                if isinstance(v := output.get(name), str | dict) and v}
        used = self._made.held(call.payload)
        self._past.append(_Past(len(self._past) + 1, call.action, call.df, frozenset(map(_key, kept.values())), used,
                                self._kept.keep(replace(call, output=kept))))
        self._made.add(kept.values())
        return len(self._past)

    def _record(self, call: MagicCall, seq: int, why: str | None = None) -> None:
        """Record ``call``, the ``seq``-th of the session, as a step in the session's order; ``why`` it was
        brought in, for a call that was not recorded when it ran."""
        outer = self._now, self._named
        self._now = seq
        try:
            self._step(call, seq, why)
        finally:
            self._now, self._named = outer

    def _step(self, call: MagicCall, seq: int, why: str | None) -> None:
        taken = {s["id"] for s in self.steps}
        step_id = step_id_for(call.out or call.action.split(".", 1)[1], taken)
        payload = dict(call.payload) if isinstance(call.payload, Mapping) else call.payload
        if call.df and call.action == "etl.push":
            payload = self._snapshot(call, step_id)
            if payload is None:
                return
        if call.df and call.action == "etl.pull" and isinstance(payload, dict):
            payload.setdefault("exportType", "csv")
            payload.setdefault("exportName", f"{payload.get('virtualFileId') or 'virtual-file'}.csv")
        step: dict[str, Any] = {"id": step_id, "action": call.action, "input": None}
        self._seq_of[step_id] = seq  # its id taken before its input brings in earlier cells
        self.steps.append(step)
        self._named = {_key(value): ref for expr, value in call.placeholders
                       if (ref := _written_ref(expr, self._outs)) is not None}
        if step_id in self._snapshots:  # its input was made here, not by the cell: nothing to refer to
            inp = payload
            self.notes.append(f"{step_id}: pushes a snapshot of the DataFrame {call.df} taken when its cell ran "
                              f"({self._snapshots[step_id].file_name} in the data folder beside this file), "
                              "not the frame: run the cell and export again to change the rows")
        else:
            inp = ({k: self.rewrite(v, f"{step_id}.{k}") for k, v in payload.items()} if isinstance(payload, dict)
                   else self.rewrite(payload, step_id))  # the input mapping itself stays a mapping
        step["input"] = inp
        if call.action == "etl.iterate" and isinstance(payload, dict) and isinstance(payload.get("content"), list):
            self.notes.append(f"{step_id}: Iterate over an inline array goes on from the one position kept per "
                              "array content (README, Iterate), which this session and every run share: a run "
                              "starts where the last call over the same array stopped, not where the cell did; "
                              "to get the cell's batches, iterate a virtual file pushed from the array instead "
                              "(each run pushes its own, with its own position)")
        self.steps.sort(key=lambda s: self._seq_of[s["id"]])
        self._chain()
        if why is not None:
            self._added[step_id] = why
        if call.out and (why is None or call.out not in self._outs):  # a later cell's -o of the name wins
            self._outs[call.out] = step_id
        if not (call.df and call.action == "etl.pull"):  # a DataFrame is not what the step outputs
            self.index(step_id, call.action, call.output, inp)

    def _snapshot(self, call: MagicCall, step_id: str) -> dict[str, Any] | None:
        """The input of a Push of the rows ``%etl push --df`` stored (snapshot taken now, before a later
        cell changes the virtual file); None, and one line saying why, when it cannot be taken."""
        vf_id = call.output.get("virtualFileId") if isinstance(call.output, Mapping) else None
        taken = {s.file_name.removesuffix(".json") for s in self._snapshots.values()}
        name = step_id_for(call.df if isinstance(call.df, str) else "frame", taken) + ".json"
        if self.resources is None or not isinstance(vf_id, str):
            self._not_kept(call, "etl.pull failed (500): no session to pull the pushed rows from")
            return None
        try:
            snapshot, columns = Snapshot.take(self.resources(), vf_id, name)
        except ConnectorError as exc:
            self._not_kept(call, exc.summary())
            return None
        self._snapshots[step_id] = snapshot
        return {"platformFile": "${file:" + name + "}", "parameters": {"schema": [_escape(c) for c in columns]}}

    def _chain(self) -> None:
        """Each step that does not already refer to the one before it runs after it (``after``)."""
        for i, step in enumerate(self.steps):
            previous = self.steps[i - 1]["id"] if i else None
            after = [previous] if previous and "${" + previous not in _key(step["input"]) else None
            rest = {k: v for k, v in step.items() if k not in ("id", "action", "after")}
            head = {"id": step["id"], "action": step["action"], **({"after": after} if after else {})}
            step.clear()  # in place: the step being recorded is still being filled in
            step.update(head | rest)

    def _bring_in(self, key: str, where: str) -> str | None:
        """A value no recorded step made, made by a cell that is no step (run before ``%pipeline record``,
        while it was stopped, or dropped by ``--new``): that cell becomes a step, in the session's order,
        with the cells that changed the file in between (:data:`CHANGES_ITS_INPUT`) — and, through their own
        inputs, what they needed. The reference to it; None when no such cell made it. A cell a pipeline
        cannot repeat (a pushed DataFrame) is a problem, which stops the export."""
        steps = set(self._seq_of.values())
        earlier = [p for p in self._past if p.seq < self._now and p.seq not in steps]
        maker = next((p for p in earlier if p.holds(key)), None)
        if maker is None:
            return None
        value = json.loads(key)
        shown = value if isinstance(value, str) else value.get("name") or "a platform file"
        if maker.df:
            self.problems.append(f"{where}: {shown} was made by `%etl push --df {maker.df}`, a cell not "
                                 "recorded, which a pipeline cannot repeat without its rows: run that cell again "
                                 "while recording (then the cells using it), and export")
            return None
        for past in earlier:
            changes = past.action in CHANGES_ITS_INPUT and past.uses(key)
            if past.seq >= maker.seq and (past.holds(key) or changes) \
                    and past.seq not in set(self._seq_of.values()):  # not brought in meanwhile, as another's input
                why = (f"({past.action}, a cell not recorded: run before %pipeline record or while it was "
                       f"stopped) {'made' if past is maker else 'changed'} what {where} uses")
                self._record(past.load(), past.seq, why)
        made = next(step_id for step_id, seq in self._seq_of.items() if seq == maker.seq)
        # the maker's, also where a later cell output the same id (Map overwriting the file): the steps run in order
        return next((r for r in self._refs.get(key, ()) if r.split(".", 1)[0] == made), None) \
            or self.reference(key, where)

    def _not_kept(self, call: MagicCall, why: str) -> None:
        """A pushed DataFrame whose rows could not be kept: not recorded, and one line saying why."""
        self.skipped.append(f"{call.action} --df {call.df} (its rows could not be kept for the pipeline: {why})")
        print(f"%pipeline record: not recorded: {self.skipped[-1]}")

    # -- outputs -> references ---------------------------------------------------------------------
    def index(self, step_id: str, action: str, output: Any, inp: Any) -> None:
        """Remember the referable fields of a step's output. Not the whole output (``input: ${step}``
        is no input), nothing inside a field (a row's ``id`` column is data, not an id), no empty value.
        An optional extension (Push's ``rejectsFileId``) only when the step's recorded input ``inp``
        guarantees it (``onRowError: quarantine``), as the pipeline's validation asks."""
        output = json.loads(_key(output)) if output is not None else None
        if not isinstance(output, dict):  # a bare output ("ok", null)
            return
        spec = get_action(action)
        unreferable = spec.optional_output_fields - spec.outputs_present(inp)
        for name in referable_fields(action):
            value = output.get(name)
            if not value:
                continue
            if name in unreferable:  # present only when it applies: a pipeline cannot refer to it
                self._unreferable[_key(value)] = (f"{step_id}'s {name}, which a pipeline cannot refer to "
                                                  f"(an optional extension of {action}'s output)")
            else:
                self._refs.setdefault(_key(value), []).append(f"{step_id}.{name}")

    def reference(self, key: str, where: str) -> str | None:
        """The reference for the value whose canonical JSON is ``key``, or None (it stays a literal).

        The reference the cell wrote (``{{load.virtualFileId}}``) when it is one of the value's; else the
        one output holding the value. Two steps' outputs holding it and no ``{{…}}`` naming one (a Python
        variable): no guess — the literal, and a note."""
        refs = [r for r in self._refs.get(key, ()) if self._seq_of[r.split(".", 1)[0]] < self._now]
        if not refs:
            if key in self._unreferable:
                self.notes.append(f"{where}: left the notebook's value: it is {self._unreferable[key]}")
                return None
            return self._bring_in(key, where)
        if self._named.get(key) in refs:
            return self._named[key]
        if len({ref.split(".", 1)[0] for ref in refs}) == 1:
            return refs[0]
        self.notes.append(f"{where}: left the notebook's value: it is the output of "
                          f"{' and '.join(refs)}; write ${{step.field}} for the one meant")
        return None

    def rewrite(self, value: Any, where: str) -> Any:
        """The input with earlier outputs replaced by references, literals escaped; ``where`` (the
        step and field) names a value left literal in :attr:`notes`."""
        if isinstance(value, dict | list) and value:
            key = _key(value)
            if (ref := self.reference(key, where)) is not None:
                return "${" + ref + "}"
            if key in self._files:
                return "${file:" + self._files[key] + "}"
            if isinstance(value, dict):
                return {k: self.rewrite(v, f"{where}.{k}") for k, v in value.items()}
            return [self.rewrite(v, f"{where}.{i}") for i, v in enumerate(value)]
        if isinstance(value, str) and value:
            if (ref := self.reference(_key(value), where)) is not None:
                return "${" + ref + "}"
            return self._embedded(value, where)
        if isinstance(value, Decimal):  # the magic's 1.50: a pipeline's literal is run config, a JSON float
            return float(value)
        return value

    def _embedded(self, text: str, where: str) -> str:
        """Long ids inside a longer string become interpolated references, every occurrence (the
        longest id where two overlap)."""
        ids = sorted((s for k in self._refs if k.startswith('"') and len(s := json.loads(k)) >= MIN_EMBEDDED
                      and s in text), key=len, reverse=True)
        if not ids:
            return _escape(text)
        parts, pos = [], 0
        for match in re.finditer("|".join(map(re.escape, ids)), text):
            ref = self.reference(_key(match.group()), where)
            parts += [_escape(text[pos:match.start()]), _escape(match.group()) if ref is None else "${" + ref + "}"]
            pos = match.end()
        return "".join([*parts, _escape(text[pos:])])

    # -- the pipeline ------------------------------------------------------------------------------
    def pipeline(self, name: str, base_dir: str | os.PathLike[str] | None = None,
                 data_dir: str | None = None) -> dict[str, Any]:
        """The pipeline as data; ``${file:…}`` paths relative to ``base_dir`` when it is given, snapshots
        in ``data_dir`` (relative to the pipeline file; default ``<name>-data``)."""
        data_dir = data_dir or f"{name}-data"
        steps = []
        for s in self.steps:
            if s["id"] in self._snapshots:
                s = dict(s, input={**s["input"], "platformFile": "${file:" + data_dir + "/"
                                   + self._snapshots[s["id"]].file_name + "}"})
            elif base_dir:
                s = dict(s, input=_relative_files(s["input"], base_dir))
            steps.append(s)
        return {"name": name, "description": "recorded in a notebook with %pipeline record", "steps": steps}

    def yaml(self, name: str, base_dir: str | os.PathLike[str] | None = None, data_dir: str | None = None) -> str:
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        header = [f"# recorded with %pipeline record on {stamp}; steps keep the notebook's order (`after`):",
                  "# remove an `after` to let independent steps run in parallel."]
        header += [_comment(f"cannot export: {s}") for s in self.problems]
        header += [_comment(f"added: {step_id} {why}") for step_id, why in self._added.items()]
        header += [_comment(f"not recorded: {s}") for s in self.skipped]
        header += [_comment(f"check: {s}") for s in self.notes]
        body = yaml.dump(self.pipeline(name, base_dir, data_dir), Dumper=_Dumper, sort_keys=False,
                         allow_unicode=True, width=110)
        return "\n".join(header) + "\n" + body

    def export(self, path: str | os.PathLike[str], name: str | None = None) -> Path:
        """Write the pipeline to ``path`` once it passes the checks of ``connector-ops pipeline validate``
        (a ``--name`` the job-name rule refuses among them); else raise their
        :class:`~connector_ops.pipelines.dsl.PipelineError` and write nothing. Snapshots go to
        ``<stem>-data/`` beside it, first: the checks look for the files it refers to. One that would
        replace a file holding other bytes is a :class:`FileExistsError`, before anything is written; a
        failure after that removes the snapshots it wrote."""
        from connector_ops.pipelines.dsl import parse_pipeline
        from connector_ops.pipelines.dsl.source import parse_yaml

        if self.problems:
            raise ConnectorError(400, {"message": "not written: the pipeline would not do what the cells did: "
                                                  + "; ".join(self.problems)}, action="pipeline export")
        target = Path(path).expanduser().resolve()
        data_dir = target.parent / data_dir_for(target)
        text = self.yaml(name or pipeline_name_for(target), target.parent, data_dir.name)
        files = self._resources()["platform_files"] if self._snapshots else None
        dests = {data_dir / s.file_name: (step_id, s) for step_id, s in self._snapshots.items()}
        for dest, (step_id, snapshot) in dests.items():  # all checked before any is written
            with _reading_snapshot(step_id):
                if snapshot.differs_from(files, dest):
                    raise FileExistsError(errno.EEXIST, f"{dest} exists and holds other rows; move it away or "
                                                        "export under another name")
        created = [dest for dest in dests if not dest.exists()]
        made_dir = bool(dests) and not data_dir.exists()
        try:
            for dest, (step_id, snapshot) in dests.items():
                assert files is not None  # (dests come from snapshots)
                data_dir.mkdir(exist_ok=True)
                with _reading_snapshot(step_id), files.open(snapshot.platform_file) as stored, \
                        atomic_write(dest) as handle:
                    shutil.copyfileobj(stored, handle)
            parse_pipeline(parse_yaml(text, str(target)))
            with atomic_write(target) as handle:
                handle.write(text.encode("utf-8"))
        except BaseException:
            for written in created:
                written.unlink(missing_ok=True)
            if made_dir:
                with contextlib.suppress(OSError):  # only when empty
                    data_dir.rmdir()
            raise
        return target

    def _resources(self) -> Mapping[str, Any]:
        if self.resources is None:
            raise ConnectorError(500, {"message": "no session to read the DataFrame snapshots from"},
                                 action="pipeline export")
        return self.resources()


@contextlib.contextmanager
def _reading_snapshot(step_id: str) -> Iterator[None]:
    """A snapshot gone from the store (``connector-ops gc``, another store set since) is one line saying what
    to do, not a traceback."""
    try:
        yield
    except ConnectorOpsError as exc:
        raise ConnectorError(exc.status, {"message": f"the snapshot of step {step_id} cannot be read ({exc}): "
                                                    "run its cell again and export"},
                             action="pipeline export") from None


def _relative_files(value: Any, base_dir: str | os.PathLike[str]) -> Any:
    if isinstance(value, dict):
        return {k: _relative_files(v, base_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [_relative_files(v, base_dir) for v in value]
    if isinstance(value, str) and value.startswith("${file:") and value.endswith("}"):
        path, mark, options = value[len("${file:"):-1].partition("?")
        try:
            return "${file:" + os.path.relpath(path, base_dir) + mark + options + "}"
        except ValueError:  # another drive (Windows): keep it absolute
            return value
    return value
