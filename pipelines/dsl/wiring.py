"""The kinds of values a reference wires whole into a field, against what the field takes.

``pipeline validate`` refuses, at file:line, what would otherwise fail mid-run as a 400 or a failed type check:
a platform file where a virtual file id goes (or the other way), a list or an object where one value goes, a
field below a text output. What a reference gives is known from the type of the output field it names (the
action's output model), from ``${file:…}`` (a platform file) and from ``${batch.…}``; what a field takes from
the action's input model (``foreach.virtualFileId`` takes a virtual file id).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from connector_ops.kernel.errors import field_path
from connector_ops.kernel.platform_file import PlatformFile
from connector_ops.pipelines.dsl import references as r
from connector_ops.pipelines.dsl.field_annotations import (
    annotation_at,
    field_annotation,
    is_object,
    only_lists,
    scalar_name,
    takes_list,
)
from connector_ops.pipelines.dsl.model import Step
from connector_ops.registry import FIELD_KINDS

#: the type of each field of ``${batch.…}`` (a batch's rows, its index, its virtual file)
BATCH_TYPES: dict[str, Any] = {"rows": list[dict[str, Any]], "index": int, "virtualFileId": str}


@dataclass(frozen=True)
class Given:
    """What a reference gives: its type (as far as known), its kind (:data:`FIELD_KINDS`), where it comes from
    (for the message) and, for a whole output, the output's fields (to suggest the one meant)."""

    annotation: Any
    kind: str | None
    what: str
    root: str = ""
    fields: tuple[str, ...] = ()


def given_by(ref: r.Ref, target: Step | None) -> Given | None:
    """What ``ref`` gives when it is a field's whole value; ``None`` when unknown here (an env variable, a
    trigger field, an untyped or nested output, a foreach step's output: a list per batch, checked apart)."""
    if ref.root == r.FILE:
        return Given(PlatformFile, FIELD_KINDS["platformFile"],
                     f"the local file {ref.path[0]}, stored as a platform file when the step runs")
    if ref.root == r.BATCH:
        if len(ref.path) != 1 or ref.path[0] not in BATCH_TYPES:
            return None
        return Given(BATCH_TYPES[ref.path[0]], FIELD_KINDS.get(ref.path[0]), f"the batch's {ref.path[0]}")
    if target is None or target.foreach is not None or target.action.output_model is None:
        return None
    spec, model = target.action, target.action.output_model
    if not ref.path:
        fields = tuple(spec.output_fields)
        return Given(model, None, f"the whole output of {spec.name}: {', '.join(fields)}", ref.root,
                     fields)
    if len(ref.path) == 1 and ref.path[0] in spec.output_fields:
        return Given(field_annotation(model, ref.path[0]), FIELD_KINDS.get(ref.path[0]),
                     f"{spec.name}'s {ref.path[0]}")
    return None


def wanted_by(step: Step, loc: tuple[str | int, ...]) -> tuple[Any, str] | None:
    """The type the field at ``loc`` (a location in the file: ``steps, i, input, …``) takes and how to name it;
    ``None`` when unknown here (a field the model does not type, inside a list)."""
    if loc[2:3] == ("input",):
        annotation = annotation_at(step.action.input_model, loc[3:])
        return None if annotation is None else (annotation, field_path(loc[3:]))
    if loc[2:4] == ("foreach", "virtualFileId"):
        return str, "foreach.virtualFileId"
    return None


def wiring_problem(ref: r.Ref, given: Given, wanted: tuple[Any, str]) -> str | None:
    """Why ``given`` cannot be the whole value of the field ``wanted``: another kind (a platform file where a
    virtual file id goes), a list or an object where one value goes; ``None`` when it can, or may."""
    annotation, where = wanted
    field = where.rsplit(".", 1)[-1]
    kind = FIELD_KINDS.get(field)
    if kind and given.kind and kind != given.kind:
        return f"{ref.text} is a {given.kind} ({given.what}); `{where}` takes a {kind}"
    takes = f"a {kind}" if kind else "one value"
    if only_lists(given.annotation) and not takes_list(annotation):
        return f"{ref.text} is a list ({given.what}); `{where}` takes {takes}"
    if is_object(given.annotation) and scalar_name(annotation) is not None:
        meant = [f for f in given.fields if f == field or (kind and FIELD_KINDS.get(f) == kind)]
        hint = f": write ${{{given.root}.{meant[0]}}}" if meant else ""
        return f"{ref.text} is an object ({given.what}); `{where}` takes {takes}{hint}"
    return None
