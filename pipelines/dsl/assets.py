"""``asset:`` on a pipeline step: the step's virtual file or platform file is a Dagster asset.

    - id: sales
      action: etl.push
      asset: sales/raw                 # the asset key ("/" separates its path)
      group: sales                     # optional: the asset group
      description: The sales CSV, loaded   # the step's description is the asset's
      owners: [team:sales, ana@example.com]
      kinds: [csv, sqlite]

The Definitions declare one ``AssetSpec`` per such step, with lineage to the assets its inputs came from
(through steps that are not assets themselves), so the UI's asset graph shows the pipeline; each run of
the pipeline records a materialisation of it carrying the output's metadata (``dagster/row_count``,
``dagster/column_schema``, a preview; a platform file's path and size) and where the data is
(``virtual_file_id`` or ``platform_file``). They are materialised by running the pipeline's job.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import dagster as dg

from connector_ops.ops.asset_files import FILE_ONLY_FROM, asset_file_name, file_input_problem
from connector_ops.ops.assets import asset_field
from connector_ops.pipelines.dsl import references as r
from connector_ops.pipelines.dsl.model import Asset, Pipeline, Step
from connector_ops.pipelines.dsl.names import END, is_owner
from connector_ops.pipelines.dsl.sections import Report
from connector_ops.registry import ActionSpec

ASSET_STEP_KEYS = ("asset", "group", "owners", "kinds")
_KEY_PART = re.compile(r"^[A-Za-z0-9_-]+$")
#: an asset group name as Dagster accepts it (a leading digit is fine)
GROUP = rf"^[A-Za-z0-9_]+{END}"
_GROUP = re.compile(GROUP)



def _strings(value: Any) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value):
        return list(value)
    return None


def parse_asset(item: Mapping[str, Any], path: tuple[str | int, ...], spec: ActionSpec | None,
                foreach: bool, report: Report) -> Asset | None:
    """The asset a step declares (``None`` when it declares none or has problems, all reported)."""
    raw = item.get("asset")
    if raw is None:
        for key in ASSET_STEP_KEYS[1:]:
            if key in item:
                report((*path, key), f"`{key}` describes an asset: add `asset: <key>` to the step")
        return None
    parts = raw.split("/") if isinstance(raw, str) else []
    ok = bool(parts) and all(_KEY_PART.fullmatch(p) for p in parts)
    if not ok:
        report((*path, "asset"), "`asset` must be a key like `sales/raw`: parts of letters, digits, _ and -, "
                                 "separated by /")
    group = item.get("group")
    if group is not None and not (isinstance(group, str) and _GROUP.fullmatch(group)):
        report((*path, "group"), "`group` must be a name of letters, digits and _")
        ok = False
    owners, kinds = _strings(item.get("owners", [])), _strings(item.get("kinds", []))
    if owners is None:
        report((*path, "owners"), "`owners` must be a list of e-mail addresses or team:NAME")
        ok = False
    for i, owner in enumerate(owners or []):
        if not is_owner(owner):
            report((*path, "owners", i), f"owner {owner!r} is neither an e-mail address nor team:NAME "
                                         f"(e.g. team:{owner.strip()})")
            ok = False
    if kinds is None:
        report((*path, "kinds"), "`kinds` must be a list of names (e.g. csv, sqlite)")
        ok = False
    if foreach:
        report((*path, "asset"), "a foreach step makes one output per batch; it cannot be an asset")
        ok = False
    field = None
    if spec is not None:
        field = asset_field(spec)
        if field is None:
            report((*path, "asset"), f"{spec.name} produces no virtual file or platform file to be an asset")
            ok = False
    source = FILE_ONLY_FROM.get(field or "")
    inp = item.get("input")
    if field is not None and source is not None and isinstance(inp, Mapping) and source in inp \
            and not isinstance(inp[source], str):
        report((*path, "input", source), f"`asset` needs a virtual file: {file_input_problem(field, inp[source])}")
        ok = False
    if ok:
        try:
            asset_file_name(dg.AssetKey(parts))
        except ValueError as exc:
            report((*path, "asset"), str(exc))
            ok = False
    if not ok or field is None:
        return None
    return Asset(key=tuple(parts), field=field, group=group, owners=tuple(owners or ()), kinds=tuple(kinds or ()))


def upstream_steps(step: Step) -> set[str]:
    """The steps whose outputs ``step`` reads (``after`` orders without data: no lineage)."""
    sources = [step.input] + ([step.foreach.virtual_file_id] if step.foreach is not None else [])
    return {ref.root for source in sources for _loc, ref, _exact in r.find_refs(source)
            if ref.root not in r.RESERVED_ROOTS}


def asset_deps(pipeline: Pipeline) -> dict[str, set[tuple[str, ...]]]:
    """Step id -> the asset keys its data came from: the nearest asset steps upstream."""
    found: dict[str, set[tuple[str, ...]]] = {}
    for step in pipeline.steps:  # dependency order: upstream steps are done first
        keys: set[tuple[str, ...]] = set()
        for up in upstream_steps(step):
            source = pipeline.step(up)
            keys |= {source.asset.key} if source.asset is not None else found[up]
        found[step.id] = keys
    return found


def asset_specs(pipeline: Pipeline) -> list[dg.AssetSpec]:
    """One ``AssetSpec`` per asset step, its deps the assets upstream (the lineage the UI draws)."""
    deps = asset_deps(pipeline)
    specs = []
    for step in pipeline.steps:
        if step.asset is None:
            continue
        a = step.asset
        specs.append(dg.AssetSpec(
            key=dg.AssetKey(list(a.key)),
            deps=[dg.AssetKey(list(k)) for k in sorted(deps[step.id])],
            description=step.description or f"`{a.field}` of step `{step.id}` ({step.action.name}) "
                                            f"of pipeline {pipeline.name}",
            group_name=a.group,
            owners=list(a.owners) or None,
            kinds=set(a.kinds) or None,
            metadata={"pipeline": pipeline.name, "step": step.id, "action": step.action.name},
        ))
    return specs
