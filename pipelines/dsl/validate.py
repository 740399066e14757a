"""Check a pipeline file completely before anything runs, reporting every problem with its line.

Checked: the file's keys, step ids, actions (known, with suggestions), each step's ``input`` against
the action's input model (unknown fields, missing required fields, wrong types of literal values;
parts holding references are checked when the step runs), every reference (step and output field
exist, env names, ``batch``/``trigger`` only where they exist, ``file:`` paths exist), ``after``,
``foreach``, cycles, the cron schedule and its time zone. The result lists steps in dependency order.
A schedule that loads but will not fire as it reads (``*/90`` minutes: hourly) is a notice, not a problem
(:mod:`.cron`).
"""

from __future__ import annotations

import difflib
import functools
import importlib.resources
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import ValidationError

from connector_ops.kernel.errors import InvalidInput, field_path
from connector_ops.kernel.limits import check_payload
from connector_ops.kernel.notices import silenced, warn
from connector_ops.ops.asset_files import IN_PLACE_FLAGS, asset_file_name, in_place_problem
from connector_ops.ops.factory import tell_stale_side_with
from connector_ops.pipelines.dsl import references as r
from connector_ops.pipelines.dsl.assets import ASSET_STEP_KEYS, parse_asset
from connector_ops.pipelines.dsl.checks import parse_check
from connector_ops.pipelines.dsl.cron import step_notices, valid_cron
from connector_ops.pipelines.dsl.field_annotations import (
    annotation_at,
    field_annotation,
    fields_of,
    scalar_name,
    takes_list,
)
from connector_ops.pipelines.dsl.local_files import file_digests
from connector_ops.pipelines.dsl.model import Foreach, Pipeline, PipelineError, Problem, Step, Trigger
from connector_ops.pipelines.dsl.names import NAME, RESERVED_NAMES, is_reserved_job_name, name_like, why_not_a_name
from connector_ops.pipelines.dsl.notify import MAIL_ACTION, parse_notify
from connector_ops.pipelines.dsl.retries import parse_retry
from connector_ops.pipelines.dsl.sections import whole_number
from connector_ops.pipelines.dsl.source import Document, SourceError, parse_yaml
from connector_ops.pipelines.dsl.source import Path as SourcePath
from connector_ops.pipelines.dsl.text_keys import key_problem, non_text_keys, with_text_keys, written
from connector_ops.pipelines.dsl.wiring import BATCH_TYPES, given_by, wanted_by, wiring_problem
from connector_ops.registry import (
    ACTIONS,
    ActionSpec,
    closest_name,
    get_action,
    load_all,
    problem_of,
    unknown_field_hint,
)

#: keys that turn something on (a schedule, retries, a sensor, mails; per step a fan-out, retries, a check): one
#: written without a value (``retry:`` and nothing under it) is a problem, not silently nothing
NOT_EMPTY_TOP_KEYS = ("schedule", "timezone", "on_new_file", "retry", "notify")
NOT_EMPTY_STEP_KEYS = ("foreach", "retry", "check")
TOP_KEYS = ("name", "description", "schedule", "timezone", "tags", "on_new_file", "retry", "notify", "steps")
STEP_KEYS = ("id", "action", "input", "after", "foreach", "description", "retry", *ASSET_STEP_KEYS, "check")
FOREACH_KEYS = ("virtualFileId", "maxBatchSize")
TRIGGER_KEYS = ("folderId", "minimumIntervalSeconds")
DEFAULT_BATCH_SIZE = 1000
_NAME = re.compile(NAME)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CLOSED_REFERENCE = re.compile(r.CLOSED_REFERENCE)


@functools.cache
def iana_time_zones() -> frozenset[str]:
    """The IANA time zone names, as the ``tzdata`` package (a Dagster dependency) lists them.

    Not ``zoneinfo.available_timezones()``: that also walks the machine's zone files, which hold ``localtime``
    (whatever zone this host happens to be in) and other local names; a pipeline file means one zone on
    every host that runs it."""
    with importlib.resources.files("tzdata").joinpath("zones").open(encoding="utf-8") as zones:
        return frozenset(line.strip() for line in zones if line.strip())


class _Checker:
    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.problems: list[Problem] = []
        self.base_dir = Path(doc.file).resolve().parent if doc.file != "<string>" else Path.cwd()
        self.broken_ids: set[str] = set()  # steps with errors of their own: references to them are not reported

    def add(self, path: Sequence[str | int], message: str, step: str | None = None) -> None:
        self.problems.append(Problem(*self.doc.place(tuple(path)), message, step))

    # -- top level -------------------------------------------------------------------------------
    def pipeline(self) -> Pipeline | None:
        data = self.doc.data
        if not isinstance(data, Mapping):
            self.add((), "a pipeline file is a mapping with `name` and `steps`")
            return None
        for key in data:
            if key not in TOP_KEYS:
                self.add((key,), f"unknown key {key!r}; allowed: {', '.join(TOP_KEYS)}")
        self.not_empty(data, (), NOT_EMPTY_TOP_KEYS, None)
        name: Any = data.get("name")  # as written: checked below
        if name is None:
            self.add(("name",), "`name` is required: letters, digits and _ (it becomes the job name)")
        elif not isinstance(name, str) or not _NAME.fullmatch(name):
            suggestion = name_like(name) if isinstance(name, str) else None
            hint = f"; e.g. {suggestion!r}" if suggestion else ""
            self.add(("name",), f"`name` {name!r} is not a valid job name: {why_not_a_name(name)} — use letters, "
                                f"digits and _{hint}")
        elif name in RESERVED_NAMES:
            self.add(("name",), f"`name` {name!r} is reserved by Dagster (a Python keyword or one of its own names);"
                                f" e.g. {name + '_pipeline'!r}")
        elif is_reserved_job_name(name):
            self.add(("name",), f"`name` {name!r} is reserved by Dagster for its asset jobs (Dagster would refuse "
                                f"the whole code location); e.g. {name.strip('_') + '_pipeline'!r}")
        description = data.get("description")
        if description is not None and not isinstance(description, str):
            self.add(("description",), "`description` must be a string")
        schedule, timezone = data.get("schedule"), data.get("timezone")
        if schedule is not None and (not isinstance(schedule, str) or not valid_cron(schedule)):
            self.add(("schedule",), f"`schedule` {schedule!r} is not a valid cron string (e.g. \"0 6 * * *\")")
        elif schedule is not None:  # valid, so it loads (as the editor schema says), but not as it reads
            for notice in step_notices(schedule):
                warn(str(Problem(*self.doc.place(("schedule",)), notice)))
        if timezone is not None and (not isinstance(timezone, str) or timezone not in iana_time_zones()):
            self.add(("timezone",),
                     f"`timezone` {timezone!r} is not an IANA time zone name (e.g. UTC or Europe/Berlin)")
        elif timezone is not None and schedule is None:
            self.add(("timezone",), "`timezone` only applies to a `schedule`; add one or remove `timezone`")
        tags = {} if data.get("tags") is None else data["tags"]  # `tags: []`, `''`, `false` are no mapping
        if not isinstance(tags, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
            self.add(("tags",), "`tags` must map names to strings")
            tags = {}
        trigger = self.trigger(data.get("on_new_file"))
        retry = parse_retry(data.get("retry"), ("retry",), self.add)
        steps = self.steps(data.get("steps"), trigger is not None)
        mail = get_action(MAIL_ACTION)
        notify = parse_notify(data.get("notify"), steps, self.add,
                              lambda message, path: self.check_input(mail, message, path, None))
        if self.problems:
            return None
        files = file_digests(steps, str(self.base_dir))  # the version covers their content
        return Pipeline(
            name=name, steps=steps, file=self.doc.file, description=description, schedule=schedule,
            timezone=timezone, tags=dict(tags), on_new_file=trigger, base_dir=str(self.base_dir), retry=retry,
            notify=notify, files=files, digest=self.doc.digest(files),
        )

    def trigger(self, raw: Any) -> Trigger | None:
        if raw is None:
            return None
        path = ("on_new_file",)
        if not isinstance(raw, Mapping) or "folderId" not in raw:
            self.add(path, "`on_new_file` needs `folderId` (the drive folder to watch)")
            return None
        for key in raw:
            if key not in TRIGGER_KEYS:
                self.add((*path, key), f"unknown key {key!r} in on_new_file; allowed: {', '.join(TRIGGER_KEYS)}")
        folder = raw["folderId"]
        if not _some_text(folder):
            self.add((*path, "folderId"), f"`folderId` {json.dumps(folder)} is not a drive folder id: write the id "
                                          "or ${env.NAME} (an empty id would watch the whole drive, its root)")
        for loc, ref, _exact in self.refs(folder, (*path, "folderId"), None):
            if ref.root != r.ENV:
                self.add(loc, f"{ref.text}: on_new_file.folderId may only use ${{env.NAME}}")
        interval = whole_number(raw.get("minimumIntervalSeconds", 30))
        if interval is None or interval < 1:
            self.add((*path, "minimumIntervalSeconds"), "must be a whole number of seconds, at least 1")
            interval = 30
        return Trigger(folder_id=folder, minimum_interval_seconds=interval)

    # -- steps -----------------------------------------------------------------------------------
    def steps(self, raw: Any, has_trigger: bool) -> list[Step]:
        if not isinstance(raw, list) or not raw:
            self.add(("steps",), "`steps` must be a non-empty list of steps")
            return []
        load_all()
        steps: list[Step] = []
        seen: set[str] = set()
        for i, item in enumerate(raw):
            step = self.step(item, ("steps", i), seen)
            if step is not None:
                steps.append(step)
        by_id = {s.id: s for s in steps}
        deps = {s.id: self.step_refs(s, i_path(raw, s.id), by_id, has_trigger) for s in steps}
        return self.ordered(steps, deps, raw)

    def step(self, item: Any, path: tuple[str | int, ...], seen: set[str]) -> Step | None:
        if not isinstance(item, Mapping):
            self.add(path, "a step is a mapping with `id`, `action` and `input`")
            return None
        step_id: Any = item.get("id")  # as written: checked below
        label = step_id if isinstance(step_id, str) else None
        for key in item:
            if key not in STEP_KEYS:
                self.add((*path, key), f"unknown key {key!r}; allowed: {', '.join(STEP_KEYS)}", label)
        self.not_empty(item, path, NOT_EMPTY_STEP_KEYS, label)
        ok = True
        if step_id is None:
            self.add((*path, "id"), "`id` is required: letters, digits and single _ (it becomes the op name)", label)
            ok = False
        elif not isinstance(step_id, str) or not _NAME.fullmatch(step_id) or "__" in step_id:
            why = why_not_a_name(step_id) if not isinstance(step_id, str) or not _NAME.fullmatch(step_id) \
                else "it contains __"
            suggestion = name_like(step_id) if isinstance(step_id, str) else None
            suggestion = re.sub("_+", "_", suggestion) if suggestion else None
            hint = f"; e.g. {suggestion!r}" if suggestion and suggestion not in RESERVED_NAMES else ""
            self.add((*path, "id"), f"`id` {step_id!r} is not a valid step id: {why} — use letters, digits and "
                                    f"single _ (it becomes the op name){hint}", label)
            ok = False
        elif step_id in r.RESERVED_ROOTS:
            self.add((*path, "id"), f"`{step_id}` is reserved for ${{{step_id}…}} references", label)
            ok = False
        elif step_id in RESERVED_NAMES:
            self.add((*path, "id"), f"`{step_id}` is reserved by Dagster (a Python keyword or one of its own names) "
                                    f"and cannot name an op; e.g. {step_id + '_step'!r}", label)
            ok = False
        elif step_id in seen:
            self.add((*path, "id"), f"duplicate step id {step_id!r}", label)
            ok = False
        else:
            seen.add(step_id)
        spec = self.action(item.get("action"), (*path, "action"), label)
        inp = item.get("input", {})
        if inp is None:
            inp = {}
        if not isinstance(inp, Mapping):
            self.add((*path, "input"), "`input` must be a mapping of the action's input fields", label)
            inp = {}
        after = item.get("after", [])
        if isinstance(after, str):
            after = [after]
        if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
            self.add((*path, "after"), "`after` must be a list of step ids", label)
            after = []
        foreach = self.foreach(item.get("foreach"), (*path, "foreach"), label)
        description = item.get("description")
        if description is not None and not isinstance(description, str):
            self.add((*path, "description"), "`description` must be a string", label)
            description = None
        report = lambda p, m: self.add(p, m, label)  # noqa: E731 - the step's problems carry its id
        retry = parse_retry(item.get("retry"), (*path, "retry"), report)
        asset = parse_asset(item, path, spec, item.get("foreach") is not None, report)
        check = parse_check(item.get("check"), (*path, "check"), asset, "asset" in item, report)
        if spec is not None:
            self.check_input(spec, dict(inp), (*path, "input"), label)
        if not ok or spec is None:
            if ok:
                self.broken_ids.add(step_id)
            return None
        return Step(id=step_id, action=spec, input=dict(inp), line=self.doc.line(path), after=list(after),
                    foreach=foreach, description=description,
                    retry=retry, asset=asset, check=check)

    def not_empty(self, raw: Mapping[str, Any], path: tuple[str | int, ...], keys: Sequence[str],
                  label: str | None) -> None:
        """Each of ``keys`` written without a value is a problem: ``retry:`` with nothing under it (or what was
        under it commented out, or indented wrongly) meant retries, and would silently mean none; its parser
        then takes it as absent."""
        for key in keys:
            if key in raw and raw[key] is None:
                self.add((*path, key), f"`{key}` is empty: give it a value or remove the key", label)

    def action(self, name: Any, path: tuple[str | int, ...], label: str | None) -> ActionSpec | None:
        if not isinstance(name, str) or not name:
            self.add(path, "`action` is required (e.g. etl.push; `connector-ops actions` lists them)", label)
            return None
        if name in ACTIONS:
            return ACTIONS[name]
        close = difflib.get_close_matches(name, list(ACTIONS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; `connector-ops actions` lists them"
        self.add(path, f"unknown action {name!r}{hint}", label)
        return None

    def foreach(self, raw: Any, path: tuple[str | int, ...], label: str | None) -> Foreach | None:
        if raw is None:
            return None
        if not isinstance(raw, Mapping):
            raw = {}
        if "virtualFileId" not in raw:
            self.add(path, "`foreach` needs `virtualFileId` (the virtual file whose rows are batched)", label)
        for key in raw:
            if key not in FOREACH_KEYS:
                self.add((*path, key), f"unknown key {key!r} in foreach; allowed: {', '.join(FOREACH_KEYS)}", label)
        size = whole_number(raw.get("maxBatchSize", DEFAULT_BATCH_SIZE))
        if size is None or size < 1:
            self.add((*path, "maxBatchSize"), "`maxBatchSize` must be a whole number, at least 1", label)
            size = DEFAULT_BATCH_SIZE
        if "virtualFileId" not in raw:
            return None
        if not _some_text(raw["virtualFileId"]):
            self.add((*path, "virtualFileId"), f"`virtualFileId` {json.dumps(raw['virtualFileId'])} is not a virtual "
                                               "file id: write the id or a reference such as ${load.virtualFileId}",
                     label)
        return Foreach(virtual_file_id=raw["virtualFileId"], max_batch_size=size)

    def check_input(self, spec: ActionSpec, inp: dict[str, Any], path: tuple[str | int, ...],
                    label: str | None) -> None:
        """Validate the literal parts of ``inp`` with the action's input model."""
        keyed = []  # the keys YAML read as no text (1:, true:, ~:), said once each; the rest checked as text
        for loc, key in non_text_keys(inp):
            keyed.append((*loc, written(key)))
            self.add((*path, *loc, key), f"{field_path(keyed[-1])}: {key_problem(key)}", label)
        raw, inp = inp, with_text_keys(inp)
        templated = {loc for loc, text in r.walk_strings(inp) if _written_as_reference(text)}
        refused = None
        try:  # what no action takes (NaN, a NUL, nesting too deep …), checked as the run checks it, first
            check_payload(r.unescape(raw), nul=not spec.nul_in_values)
        except InvalidInput as exc:
            refused = _location_of(raw, exc.field)
            self.add((*path, *refused), str(exc), label)
        try:
            spec.input_model.model_validate(r.unescape(inp))
        except ValidationError as exc:
            for err in exc.errors(include_url=False):
                loc = tuple(p for p in err["loc"] if not str(p).startswith("function-"))
                if any(loc[:len(key)] == key for key in keyed):
                    continue  # under a key refused above: `7` is then no field the action has, said once
                if err["type"] != "extra_forbidden" and any(loc[:n] in templated for n in range(1, len(loc) + 1)):
                    continue  # its value is known when the step runs; an unknown field is unknown whatever it holds
                if refused is not None and loc[:len(refused)] == refused and err["type"] != "extra_forbidden":
                    continue  # the value the payload check refused, said once
                where = field_path(loc)
                if err["type"] == "extra_forbidden":
                    known = fields_of(annotation_at(spec.input_model, loc[:-1])) or []
                    meant = closest_name(str(loc[-1]), known)
                    hint = unknown_field_hint(spec.name, loc)
                    msg = f"unknown field {where!r} in {spec.name} input"
                    msg += f"; {hint}" if hint else f"; did you mean {meant!r}?" if meant else ""
                    msg += f" (fields: {', '.join(known)})" if known else ""
                elif err["type"] == "missing":
                    msg = f"{where}: is required by {spec.name}"
                else:  # a problem of the whole input (a model's own check, loc ()) names no field
                    msg = f"{where}: {problem_of(err)}" if where else problem_of(err)
                self.add((*path, *loc), msg, label)
        self.check_literals(spec, inp, templated, path, label)

    def check_literals(self, spec: ActionSpec, inp: dict[str, Any], templated: set[tuple[str | int, ...]],
                       path: tuple[str | int, ...], label: str | None) -> None:
        """Check what the input model cannot (a filter's operators and regular expressions, Validate's
        rules) with the very parser the action runs, when the value holds no reference."""
        for field, parse in _literal_checks().get(spec.name, {}).items():
            value = inp.get(field)
            if not isinstance(value, Mapping) or any(loc[:1] == (field,) for loc in templated):
                continue
            try:
                parse(r.unescape(value), field)
            except InvalidInput as exc:  # at the part refused: a --set that wrote it is named (--set:N)
                self.add((*path, field, *_location_of(value, exc.field, (field,))), str(exc), label)

    # -- references ------------------------------------------------------------------------------
    def refs(self, value: Any, path: tuple[str | int, ...], label: str | None
             ) -> Iterable[tuple[tuple[str | int, ...], r.Ref, bool]]:
        found = []
        for loc, text in r.walk_strings(value):
            try:
                parts = r.parse_template(text)
            except r.ReferenceSyntaxError as exc:
                self.add((*path, *loc), f"{field_path(loc)}: {exc}" if loc else str(exc), label)
                continue
            exact = len(parts) == 1
            found += [((*path, *loc), p, exact) for p in parts if isinstance(p, r.Ref)]
        return found

    def step_refs(self, step: Step, index: int, by_id: Mapping[str, Step], has_trigger: bool) -> set[str]:
        """Check every reference and ``after`` of ``step``; return the steps it depends on."""
        path: tuple[str | int, ...] = ("steps", index)
        deps: set[str] = set()
        sources = [(step.input, (*path, "input"), True)]
        if step.foreach is not None:
            sources.append((step.foreach.virtual_file_id, (*path, "foreach", "virtualFileId"), False))
        uses_batch = False
        for value, base, batch_ok in sources:
            for loc, ref, exact in self.refs(value, base, step.id):
                uses_batch = uses_batch or (batch_ok and ref.root == r.BATCH)
                dep = self.ref(ref, exact, loc, step, by_id, has_trigger, batch_ok)
                if dep:
                    deps.add(dep)
        if step.foreach is not None and not uses_batch:  # Dagster cannot map a step that takes no batch either
            self.add((*path, "foreach"), "a foreach step's input must use its batch (${batch.rows}, "
                                         "${batch.virtualFileId}, …): without it every batch would do the same work",
                     step.id)
        for j, other in enumerate(step.after):
            if other == step.id:
                self.add((*path, "after", j), "a step cannot run after itself", step.id)
            elif other in self.broken_ids:
                continue
            elif other not in by_id:
                self.add((*path, "after", j), f"`after` names {other!r}, which is not a step of this pipeline", step.id)
            else:
                deps.add(other)
        return deps

    def ref(self, ref: r.Ref, exact: bool, loc: tuple[str | int, ...], step: Step, by_id: Mapping[str, Step],
            has_trigger: bool, batch_ok: bool) -> str | None:
        if ref.root == r.ENV:
            if len(ref.path) < 1 or not _ENV_NAME.fullmatch(ref.path[0]):
                self.add(loc, f"{ref.text}: write ${{env.NAME}} with a variable name", step.id)
        elif ref.root == r.FILE:
            if not exact:
                self.add(loc, f"{ref.text}: a file reference must be the whole value", step.id)
            elif not (Path(self.base_dir) / ref.path[0]).is_file():
                self.add(loc, f"{ref.text}: no file {ref.path[0]!r} next to the pipeline file", step.id)
            else:
                self.wired(ref, loc, step)
        elif ref.root == r.BATCH:
            if step.foreach is None or not batch_ok:
                self.add(loc, f"{ref.text}: ${{batch…}} is only available in the input of a foreach step", step.id)
            elif not ref.path or ref.path[0] not in r.BATCH_FIELDS:
                self.add(loc, f"{ref.text}: a batch has {', '.join(r.BATCH_FIELDS)}", step.id)
            elif len(ref.path) > 1 and scalar_name(BATCH_TYPES[ref.path[0]]) is not None:
                self.add(loc, f"{ref.text}: the batch's {ref.path[0]} is {scalar_name(BATCH_TYPES[ref.path[0]])}; "
                              f"it has no field {ref.path[1]!r}", step.id)
            elif exact:
                self.wired(ref, loc, step)
        elif ref.root == r.TRIGGER:
            if not has_trigger:
                self.add(loc, f"{ref.text}: ${{trigger…}} needs `on_new_file` in the pipeline", step.id)
            elif not ref.path or ref.path[0] not in r.TRIGGER_FIELDS:
                self.add(loc, f"{ref.text}: the trigger has {', '.join(r.TRIGGER_FIELDS)}", step.id)
        elif ref.root == step.id:
            self.add(loc, f"{ref.text}: a step cannot refer to its own output", step.id)
        elif ref.root in self.broken_ids:
            return None
        elif ref.root not in by_id:
            close = difflib.get_close_matches(ref.root, list(by_id), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            self.add(loc, f"{ref.text}: there is no step {ref.root!r}{hint}", step.id)
        else:
            self.output_path(ref, loc, step, by_id[ref.root])
            if exact:
                self.wired(ref, loc, step, by_id[ref.root])
                self.one_per_batch(ref, loc, step, by_id[ref.root])
                self.in_place_on_asset(ref, loc, step, by_id[ref.root])
            return ref.root
        return None

    def wired(self, ref: r.Ref, loc: tuple[str | int, ...], step: Step, target: Step | None = None) -> None:
        """A value of the wrong kind wired whole into a field (a platform file where a virtual file id goes, or
        the other way; a list or an object where one value goes) is a load error, not a 400 or a failed type
        check in the middle of a run (:func:`.wiring.wiring_problem`)."""
        given, wanted = given_by(ref, target), wanted_by(step, loc)
        problem = None if given is None or wanted is None else wiring_problem(ref, given, wanted)
        if problem is not None:
            self.add(loc, problem, step.id)

    def in_place_on_asset(self, ref: r.Ref, loc: tuple[str | int, ...], step: Step, target: Step) -> None:
        """An asset step working in place (a literal ``overwriteVirtualFile: true``) on the virtual file of
        another asset step: the run would refuse it (:func:`in_place_problem`), so the file does not load."""
        field = loc[-1] if loc[2:3] == ("input",) and len(loc) == 4 else None
        if step.asset is None or target.asset is None or ref.path != (target.asset.field,):
            return
        for flag, wired in IN_PLACE_FLAGS.items():
            if field == wired:
                named = asset_file_name(dg.AssetKey(list(target.asset.key)))
                problem = in_place_problem({flag: step.input.get(flag), wired: named},
                                           dg.AssetKey(list(step.asset.key)))
                if problem is not None:
                    self.add((*loc[:3], flag), problem, step.id)

    def one_per_batch(self, ref: r.Ref, loc: tuple[str | int, ...], step: Step, target: Step) -> None:
        """A foreach step's output is a list, one value per batch: wired whole where the field takes one value
        (a virtual file id, text) it is a load error, not "Input should be a valid string" mid-run."""
        if target.foreach is None or len(ref.path) > 1:
            return  # ${check.validated.0}: one batch's value
        if loc[2:3] == ("input",):
            annotation = annotation_at(step.action.input_model, loc[3:])
            if annotation is None or takes_list(annotation):
                return  # unknown here (checked when the step runs), or a list is right
        where = field_path(loc[3:]) if loc[2:3] == ("input",) else "foreach.virtualFileId"
        self.add(loc, f"{ref.text} is a list, one value per batch of foreach step {target.id!r}; `{where}` takes "
                      f"one value (pick one batch's, e.g. {ref.text[:-1]}.0}})",
                 step.id)

    @staticmethod
    def absent_extension(ref: r.Ref, target: Step) -> str:
        """Why ``ref`` names an optional output field ``target``'s output may lack, and what to write: the
        field is a step output only when the step's input sets its condition literally (the run's input is
        then known to hold it, whatever a reference would say when the run starts)."""
        spec, name = target.action, ref.path[0]
        when = spec.present_when.get(name)
        if when is None:
            return (f"{ref.text}: {name} is an optional extension of {spec.name}'s output and not a step output; "
                    "the run records it in the step's output metadata")
        given = when.given(target.input)
        if given is None:
            sets = f"does not set `{when.field}`"
        elif isinstance(given, str) and r.is_template(given):
            sets = f"sets `{when.field}` by a reference ({given}), known only when the run starts"
        else:
            sets = f"sets `{when.field}` to {json.dumps(given)}"
        return (f"{ref.text}: {spec.name}'s output has {name} only with `{when.field}: {when.value}`, and step "
                f"{target.id!r} {sets}; write `{when.field}: {when.value}` (literally) in its input to refer to "
                f"{name}")

    def output_path(self, ref: r.Ref, loc: tuple[str | int, ...], step: Step, target: Step) -> None:
        spec = target.action
        if not ref.path:
            return
        fields = spec.output_fields
        if not fields or spec.output_model is None:  # (no model: no fields either)
            self.add(loc, f"{ref.text}: {spec.name} has a bare output; refer to it as ${{{target.id}}}", step.id)
            return
        if ref.path[0] in spec.optional_output_fields and ref.path[0] not in spec.outputs_present(target.input):
            self.add(loc, self.absent_extension(ref, target), step.id)
            return
        if ref.path[0] not in fields:
            self.add(loc, f"{ref.text}: {spec.name} has no output field {ref.path[0]!r} "
                          f"(outputs: {', '.join(fields)})", step.id)
            return
        if target.foreach is not None:
            return  # a list, one value per batch
        annotation: Any = field_annotation(spec.output_model, ref.path[0])
        for depth, key in enumerate(ref.path[1:], start=1):
            known = fields_of(annotation)
            scalar = scalar_name(annotation)
            if scalar is not None:  # ${load.virtualFileId.0}: an id is text, with nothing below it
                where = ".".join(ref.path[:depth])
                self.add(loc, f"{ref.text}: {where} is {scalar} ({spec.name}'s {where}); it has no field {key!r}",
                         step.id)
                return
            if known is None:
                return
            if key not in known:
                where = ".".join(ref.path[:depth])
                self.add(loc, f"{ref.text}: {where} has no field {key!r} (fields: {', '.join(known)})", step.id)
                return
            annotation = field_annotation(annotation, key)

    # -- order -----------------------------------------------------------------------------------
    def ordered(self, steps: list[Step], deps: Mapping[str, set[str]], raw: list[Any]) -> list[Step]:
        """Steps in dependency order (file order among independent steps); reports cycles."""
        done: list[Step] = []
        placed: set[str] = set()
        pending = list(steps)
        while pending:
            ready = [s for s in pending if deps[s.id] <= placed]
            if not ready:
                for cycle in _cycles(pending, deps):
                    first = cycle[0]
                    self.add(("steps", i_path(raw, first)),
                             f"steps {' -> '.join([*cycle, first])} form a cycle", first)
                return steps
            for s in ready:
                done.append(s)
                placed.add(s.id)
            pending = [s for s in pending if s.id not in placed]
        return done


@functools.cache
def _literal_checks() -> dict[str, dict[str, Callable[[Any, str], Any]]]:
    """Action -> input field -> the action's own parser of that field (imported when first needed)."""
    from connector_ops.etl.validation import compile_schema
    from connector_ops.resources.virtual_files.filters import parse_filter

    def rules(schema: Any, _field: str) -> Any:
        return compile_schema(schema)

    return {"etl.query": {"query": parse_filter}, "etl.delete_rows": {"request": parse_filter},
            "etl.validate": {"schema": rules}}


def _cycles(pending: list[Step], deps: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group among the steps that could not be ordered."""
    ids = {s.id for s in pending}
    found: list[list[str]] = []
    covered: set[str] = set()
    for start in (s.id for s in pending):
        if start in covered:
            continue
        path, node = [start], start
        while True:
            node = min(d for d in deps[node] if d in ids)
            if node in path:
                cycle = path[path.index(node):]
                if not covered & set(cycle):
                    found.append(cycle)
                covered.update(cycle)
                break
            path.append(node)
        covered.update(path)
    return found


def _some_text(value: Any) -> bool:
    """Whether ``value`` is text with something in it: what an id (a folder's, a virtual file's) must be; YAML reads
    ``folderId:`` as null and ``folderId: 12`` as a number, and an empty id names no folder (the drive's root)."""
    return isinstance(value, str) and bool(value.strip())


def _written_as_reference(text: str) -> bool:
    """Whether ``text`` holds a reference, or a closed ``${…}`` meant as one whose syntax is wrong (``${a b}``,
    ``${file:x?contentType=…}`` with options refused): :meth:`_Checker.refs` reports that, and the field's model
    has nothing to add of a value that is no literal ("got str"). An unclosed ``${`` is literal text to the
    model, checked as such."""
    try:
        return any(isinstance(part, r.Ref) for part in r.parse_template(text))
    except r.ReferenceSyntaxError:
        return _CLOSED_REFERENCE.search(text) is not None


def _location_of(value: Any, where: str, prefix: tuple[str | int, ...] = ()) -> tuple[str | int, ...]:
    """The location inside ``value`` that an :class:`InvalidInput`'s field (``query.c``, ``rows[0]``: written by
    :func:`field_path` from ``prefix`` and the keys down to it) names, below ``prefix``; ``()`` (the value
    itself) when none does. So a problem is placed at the part refused, not at the whole field holding it."""
    todo: list[tuple[Any, tuple[Any, ...], tuple[str | int, ...]]] = [(value, (), prefix)]  # value, location, name
    while todo:
        item, loc, named = todo.pop()
        if loc and field_path(named) == where:
            return loc
        if isinstance(item, Mapping):  # a key that is no text (YAML's 1:) is named as the checks name it: str(key)
            todo += [(child, (*loc, key), (*named, str(key))) for key, child in item.items()]
        elif isinstance(item, list):
            todo += [(child, (*loc, i), (*named, i)) for i, child in enumerate(item)]
    return ()


def i_path(raw: list[Any], step_id: str) -> int:
    """The index of the step with ``step_id`` in the raw step list."""
    return next(i for i, item in enumerate(raw) if isinstance(item, Mapping) and item.get("id") == step_id)


def _set_in(step: dict[str, Any], parts: list[str], value: Any) -> tuple[str | None, list[tuple[str, ...]]]:
    """Put ``value`` at ``step.field[.sub]`` (``parts``) in the step's input, making missing (or null) mappings
    on the way; what is wrong when a value on the way is no mapping (text, a list), which has no fields to set,
    and the input paths the override wrote: the value's and, where it made a field of the input, that field's
    (``--set load.input.x=1`` makes a field ``input``, which the action may not have: that is the override's
    problem, not the step's line's)."""
    node, keys = step, ["input", *parts[1:]]
    made: list[tuple[str, ...]] = []
    for depth, key in enumerate(keys[:-1]):
        if node.get(key) is None:
            node[key] = {}
            if depth and not made:
                made.append(tuple(keys[1:depth + 1]))
        node = node[key]
        if not isinstance(node, dict):
            if not depth:
                return f"the input of step {parts[0]!r} is a {type(node).__name__}, not a mapping of fields", []
            where = ".".join(parts[:depth + 1])
            return (f"{where} holds a {type(node).__name__}, not a mapping of fields; set it whole "
                    f"(--set {where}=…)"), []
    node[keys[-1]] = value
    return None, [*made, tuple(keys[1:])]


def override_syntax_problem(item: str) -> str | None:
    """What is wrong with how one ``--set`` is written (no ``=``, no ``step.field``), whatever the file: the
    command line's usage error (``pipeline run`` exits 2 for it, before reading the file)."""
    target, sep, _ = item.partition("=")
    if not sep or len(target.strip().split(".")) < 2:
        return f"{item!r}: write --set step.field=value"
    return None


def apply_overrides(data: Any, overrides: Iterable[str],
                    placed: dict[SourcePath, tuple[str, int]] | None = None) -> Any:
    """``--set step.field[.sub]=value`` edits of the raw file (value parsed as JSON when it is JSON).

    ``placed`` (a :attr:`Document.elsewhere`) gets the path of each value set, and of the first field of the
    input an override made on the way, -> ``("--set", n)``, n the override's 1-based position: a problem the
    validator then finds in that value (or in a field the action lacks) is the override's."""
    problems = []
    for position, item in enumerate(overrides, start=1):
        syntax = override_syntax_problem(item)
        if syntax:
            problems.append(Problem("--set", 1, syntax))
            continue
        target, _, text = item.partition("=")
        parts = target.strip().split(".")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        steps = (data.get("steps") if isinstance(data, Mapping) else None) or []
        step = next((s for s in steps if isinstance(s, dict) and s.get("id") == parts[0]), None)
        if step is None:
            problems.append(Problem("--set", 1, f"{item!r}: there is no step {parts[0]!r}"))
            continue
        problem, written = _set_in(step, parts, value)
        if problem:
            problems.append(Problem("--set", 1, f"{item!r}: {problem}"))
        elif placed is not None:
            for path in written:
                placed[("steps", steps.index(step), "input", *path)] = ("--set", position)
    if problems:
        raise PipelineError(problems)
    return data


def parse_pipeline(doc: Document) -> Pipeline:
    """The validated pipeline of a parsed document; raises :class:`PipelineError` listing every problem."""
    checker = _Checker(doc)
    pipeline = checker.pipeline()
    if checker.problems or pipeline is None:
        raise PipelineError(sorted(checker.problems, key=lambda p: p.line))
    return pipeline


def load_pipeline(path: str | Path, overrides: Iterable[str] = ()) -> Pipeline:
    """Read, (optionally) edit with ``--set`` overrides, and validate a pipeline file."""
    file = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise PipelineError([Problem(file, 1, f"cannot read the file: {exc.strerror or exc}")]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise PipelineError([Problem(file, line, f"the file is not UTF-8: byte {data[exc.start]:#04x} "
                                                 "cannot be read (save it as UTF-8)")]) from None
    try:
        doc = parse_yaml(text, file)
    except SourceError as exc:
        raise PipelineError([Problem(file, exc.line, str(exc))]) from None
    overrides = list(overrides)
    if overrides:
        doc.data = apply_overrides(doc.data, overrides, doc.elsewhere)
    return parse_pipeline(doc)


def current_digest(path: str | Path) -> str | None:
    """The digest of the pipeline as its file (and its ``${file:…}`` files) are on disk now, as the catalog would
    load it (no ``--set``), or ``None`` when it does not load: what a refused step compares with the version its
    own process loaded, to say which side is stale (:func:`~connector_ops.ops.factory.ensure_launched_definition`)."""
    try:
        with silenced():  # read again for its digest only: its notices were given when it loaded
            return load_pipeline(path).digest
    except PipelineError:
        return None


tell_stale_side_with(current_digest)
