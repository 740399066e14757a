"""Compile a validated :class:`Pipeline` into a Dagster job of the generated action ops.

Each step becomes its action op aliased to the step id; the literal parts of its input become the
op's config (the job's default run config, editable in the launchpad). References become edges:

* a field that is exactly ``${step.field}`` and that the op can take as a wired input (``platformFile``,
  ``virtualFileId``, ``fileId``, ``folderId``, ``id``) is wired straight to the upstream output;
* every other field holding a reference (nested, interpolated, ``${env…}``, ``${file:…}``,
  ``${batch…}``, ``${trigger…}``) goes into one resolver op per step (``<step>__input``) whose inputs
  are just the upstream outputs it refers to; its result feeds the action op's ``fields`` input;
* ``retry`` becomes the step's ``RetryPolicy`` (the pipeline's ``retry`` the job's ``op_retry_policy``);
* ``asset`` gives the step its own op (``<pipeline>__<step>``) that records a materialisation of the
  asset after its output, and the pipeline an ``AssetSpec`` with lineage (:mod:`.assets`); its ``check``
  a node ``<step>__check`` evaluating the asset check on that output (:mod:`.checks`);
* the file's digest (covering the ``${file:…}`` files' content) is the job tag ``connector_ops/pipeline_digest``
  (so each run's tag too), which every node checks first against its own process's
  (:func:`~connector_ops.ops.factory.ensure_launched_definition`); a resolver storing a ``${file:…}`` file
  checks its content against the digest its process loaded (:mod:`.local_files`);
* an optional output field the step's literal input guarantees (Push's ``rejectsFileId`` with
  ``onRowError: quarantine``) is an output of the step's own op, referred to like the others;
* ``after`` wires the ``after`` (Nothing) input; ``foreach`` puts the step behind
  ``etl_iterate_batches`` (``<step>__batches``), maps it over the batches (``<step>__rows`` reads each
  batch's rows when ``${batch.rows}`` is used) and collects its outputs in ``<step>__gather``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from connector_ops.kernel.version import build_version
from connector_ops.ops import all_ops
from connector_ops.ops.factory import (
    PIPELINE_DIGEST_TAG,
    PIPELINE_FILE_METADATA,
    VERSION_TAG,
    build_op,
    config_value,
    output_names,
)
from connector_ops.ops.fanout import etl_batch_rows, etl_iterate_batches
from connector_ops.pipelines.dsl import references as r
from connector_ops.pipelines.dsl.assets import asset_specs
from connector_ops.pipelines.dsl.checks import CHECK_NODE_SUFFIX, asset_checks, check_op
from connector_ops.pipelines.dsl.cron import schedule_definition
from connector_ops.pipelines.dsl.model import Pipeline, PipelineError, Problem, Step
from connector_ops.pipelines.dsl.retries import retry_policy
from connector_ops.pipelines.dsl.step_ops import (
    BATCH_INPUT,
    ROWS_INPUT,
    TRIGGER_INPUT,
    gather_op,
    pipeline_trigger,
    resolver_op,
    upstream_input,
)

TRIGGER_NODE = "trigger"
Handles = dict[str, Any]  # spec output field ("" for a bare output) -> output handle in the graph


@dataclass
class CompiledPipeline:
    pipeline: Pipeline
    job: dg.JobDefinition
    #: step id -> (node name, {spec output field: op output name}) to read results back
    outputs: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    schedule: dg.ScheduleDefinition | None = None
    sensor: dg.SensorDefinition | None = None
    #: the assets its ``asset:`` steps materialise (declared in the Definitions, with lineage)
    assets: list[dg.AssetSpec] = field(default_factory=list)
    #: the asset checks its steps declare (``check:``), run in each run and from the UI
    checks: list[dg.AssetChecksDefinition] = field(default_factory=list)
    #: run-status sensors mailing what ``notify:`` says when a run ends
    notify_sensors: list[dg.SensorDefinition] = field(default_factory=list)


@dataclass
class _Plan:
    """How one step's input splits: literal config, directly wired inputs, and resolver fields."""

    config: dict[str, Any]
    wired: dict[str, r.Ref]  # op input name -> exact reference
    resolved: dict[str, Any]  # spec field -> template


def plan_step(step: Step, foreach_steps: set[str]) -> _Plan:
    by_field = {spec_field: name for name, spec_field in step.action.wirable_inputs.items()}
    annotations = {info.alias or name: info.annotation for name, info in step.action.input_model.model_fields.items()}
    plan = _Plan({}, {}, {})
    for key, value in step.input.items():
        if not r.has_refs(value):
            plan.config[key] = config_value(annotations.get(key), r.unescape(value))
            continue
        ref = r.exact_ref(value)
        direct = (ref is not None and ref.root not in r.RESERVED_ROOTS and len(ref.path) == 1
                  and ref.root not in foreach_steps and key in by_field
                  and by_field[key] not in plan.wired)
        if direct:
            assert ref is not None  # (direct says so)
            plan.wired[by_field[key]] = ref
        else:
            plan.resolved[key] = value
    return plan


def step_extensions(step: Step) -> frozenset[str]:
    """The optional output fields the step's input guarantees as written (Push's ``rejectsFileId`` with
    ``parameters.onRowError: quarantine``): outputs of the step like the spec's, so ``${step.field}`` is an
    edge as any other reference. A condition given by a reference guarantees nothing here."""
    return step.action.outputs_present(step.input)


class _Builder:
    def __init__(self, pipeline: Pipeline) -> None:
        self.p = pipeline
        self.ops = all_ops()
        self.config: dict[str, Any] = {}
        self.outputs: dict[str, tuple[str, dict[str, str]]] = {}
        self.foreach_steps = {s.id for s in pipeline.steps if s.foreach is not None}
        self.handles: dict[str, Handles] = {}
        self.trigger: Any = None

    def op_name(self, node: str) -> str:
        """Definitions made for this job are prefixed by the job name so jobs never share a name."""
        return f"{self.p.name}__{node}"

    def resolver(self, node: str, step: Step, template: Any, *, batch: Any = None, rows: Any = None,
                 defer_env: bool = True) -> Any:
        refs = [ref for _loc, ref, _exact in r.find_refs(template)]
        steps: dict[str, dict[str, str]] = {}
        for ref in refs:
            if ref.root in r.RESERVED_ROOTS:
                continue
            names = self.out_names(ref.root)
            wanted = names if not ref.path else {ref.path[0]: names[ref.path[0]]}
            steps.setdefault(ref.root, {}).update(wanted)
        uses = {ref.root for ref in refs}
        op_def = resolver_op(
            self.op_name(node), template, steps, action=step.action.name, base_dir=self.p.base_dir,
            files=self.p.files,
            batch=batch is not None, rows=rows is not None, trigger=r.TRIGGER in uses, defer_env=defer_env,
        )
        kwargs = {upstream_input(sid, out): self.handles[sid][f] for sid, fields in steps.items()
                  for f, out in fields.items()}
        if batch is not None:
            kwargs[BATCH_INPUT] = batch
        if rows is not None:
            kwargs[ROWS_INPUT] = rows
        if r.TRIGGER in uses:
            kwargs[TRIGGER_INPUT] = self.trigger
        return op_def.alias(node)(**kwargs)

    def out_names(self, step_id: str) -> dict[str, str]:
        return self.outputs[step_id][1]

    def after(self, step: Step) -> list[Any]:
        return [next(iter(self.handles[a].values())) for a in step.after]

    def call_action(self, step: Step, plan: _Plan, *, batch: Any = None) -> Handles:
        op_def = self.ops[step.action.op_name]
        required = frozenset(plan.config) & {f.alias or n for n, f in step.action.input_model.model_fields.items()
                                             if f.is_required()}
        extensions = step_extensions(step)
        if step.asset is not None or required or extensions or step.description:  # its own op: the launchpad
            # requires the step's literal required fields (pre-filled from the job's default config), an asset step
            # records its asset, the extensions its input guarantees are outputs (${load.rejectsFileId}), and the
            # step's description is its op's (the UI shows it on the op)
            op_def = build_op(step.action.name, name=self.op_name(step.id), required_config=required,
                              assets={step.asset.field: dg.AssetKey(list(step.asset.key))} if step.asset else None,
                              extensions=extensions, description=step.description)
        kwargs: dict[str, Any] = {name: self.handles[ref.root][ref.path[0]] for name, ref in plan.wired.items()}
        if plan.resolved:
            rows = None
            if batch is not None and any(ref.root == r.BATCH and ref.path[:1] == ("rows",)
                                         for _l, ref, _e in r.find_refs(plan.resolved)):
                rows = etl_batch_rows.alias(f"{step.id}__rows")(batch=batch)
            kwargs["fields"] = self.resolver(f"{step.id}__input", step, plan.resolved, batch=batch, rows=rows)
        if step.foreach is None and step.after:
            kwargs["after"] = self.after(step)
        node = op_def.alias(step.id)
        if step.retry is not None:
            node = node.with_retry_policy(retry_policy(step.retry))
        result = node(**kwargs)
        names = output_names(step.action, extensions)
        if len(names) == 1:
            return {next(iter(names)): result}
        return {spec_field: getattr(result, out) for spec_field, out in names.items()}

    def step(self, step: Step) -> None:
        plan = plan_step(step, self.foreach_steps)
        if plan.config:
            self.config[step.id] = {"config": plan.config}
        names = output_names(step.action, step_extensions(step))
        if step.foreach is None:
            self.outputs[step.id] = (step.id, names)
            self.handles[step.id] = self.call_action(step, plan)
            if step.check is not None and step.asset is not None:
                node = f"{step.id}{CHECK_NODE_SUFFIX}"
                checked = check_op(self.op_name(node), dg.AssetKey(list(step.asset.key)), step.check).alias(node)(
                    virtual_file_id=self.handles[step.id][step.asset.field])
                if step.check.blocking:  # what reads the asset's data waits for the check
                    self.handles[step.id][step.asset.field] = checked
            return
        self.handles[step.id] = self.fan_out(step, plan, names)
        self.outputs[step.id] = (f"{step.id}__gather", {f: out for f, out in names.items()})

    def fan_out(self, step: Step, plan: _Plan, names: Mapping[str, str]) -> Handles:
        assert step.foreach is not None
        node = f"{step.id}__batches"
        source = step.foreach.virtual_file_id
        config: dict[str, Any] = {"maxBatchSize": step.foreach.max_batch_size}
        kwargs: dict[str, Any] = {}
        ref = r.exact_ref(source)
        if not r.has_refs(source):
            config["virtualFileId"] = r.unescape(source)
        elif ref is not None and ref.root not in r.RESERVED_ROOTS and len(ref.path) == 1 \
                and ref.root not in self.foreach_steps:
            kwargs["virtual_file_id"] = self.handles[ref.root][ref.path[0]]
        else:
            kwargs["virtual_file_id"] = self.resolver(f"{step.id}__source", step, source, defer_env=False)
        if step.after:
            kwargs["after"] = self.after(step)
        self.config[node] = {"config": config}
        batches = etl_iterate_batches.alias(node)(**kwargs)
        order = list(names)

        def per_batch(batch: Any) -> Any:
            handles = self.call_action(step, plan, batch=batch)
            values = tuple(handles[f] for f in order)
            return values if len(values) > 1 else values[0]

        mapped = batches.map(per_batch)
        collected = [m.collect() for m in mapped] if len(order) > 1 else [mapped.collect()]
        out_list = [names[f] for f in order]
        gathered = gather_op(self.op_name(f"{step.id}__gather"), out_list).alias(f"{step.id}__gather")(
            **dict(zip(out_list, collected, strict=True)))
        if len(order) == 1:
            return {order[0]: gathered}
        return {f: getattr(gathered, names[f]) for f in order}

    def build(self) -> dg.GraphDefinition:
        def compose() -> None:
            if self.p.on_new_file is not None:
                self.trigger = pipeline_trigger.alias(TRIGGER_NODE)()
            for step in self.p.steps:
                self.step(step)

        return dg.graph(name=self.p.name, description=self.p.description)(compose)


def compile_pipeline(pipeline: Pipeline) -> CompiledPipeline:
    """The job (default run config = the steps' literal inputs), its schedule and its sensor.

    What Dagster refuses when the definitions are built (the validator checks what it knows of) is a
    :class:`PipelineError` of the file too, never a bare Dagster exception: a caller reports it like any
    other problem and the other pipelines still load.
    """
    try:
        return _compile(pipeline)
    except dg.DagsterError as exc:
        message = f"Dagster refuses the pipeline: {type(exc).__name__}: {exc}"
        raise PipelineError([Problem(pipeline.file, 1, message)]) from None


def _compile(pipeline: Pipeline) -> CompiledPipeline:
    builder = _Builder(pipeline)
    graph = builder.build()
    tags = {"pipeline": pipeline.name, **pipeline.tags, VERSION_TAG: build_version()}
    if pipeline.digest:  # Dagster copies job tags into each run's at launch: the version the run is of
        tags[PIPELINE_DIGEST_TAG] = pipeline.digest
    default_config = {"ops": builder.config} if builder.config else {}
    job = graph.to_job(
        name=pipeline.name,
        description=pipeline.description or f"Pipeline {pipeline.name} ({pipeline.file})",
        config=default_config or None,
        tags=tags,
        metadata={PIPELINE_FILE_METADATA: pipeline.file},
        op_retry_policy=retry_policy(pipeline.retry),
    )
    compiled = CompiledPipeline(pipeline=pipeline, job=job, outputs=builder.outputs, assets=asset_specs(pipeline),
                                 checks=asset_checks(pipeline))
    if pipeline.schedule:
        compiled.schedule = schedule_definition(  # the loader has said what a too long step does
            name=f"{pipeline.name}_schedule", job=job, cron_schedule=pipeline.schedule,
            execution_timezone=pipeline.timezone, default_status=dg.DefaultScheduleStatus.STOPPED,
            description=f"Runs {pipeline.name} on `{pipeline.schedule}` (from {pipeline.file})",
        )
    if pipeline.notify:
        from connector_ops.pipelines.notifications import notify_sensors

        compiled.notify_sensors = notify_sensors(pipeline, job)
    if pipeline.on_new_file is not None:
        from connector_ops.pipelines.sensors import drive_folder_sensor

        compiled.sensor = drive_folder_sensor(job, pipeline.on_new_file, trigger_node=TRIGGER_NODE,
                                              default_config=default_config)
    return compiled
