"""Fan a virtual file out as Dagster ``DynamicOutput`` batches for ``.map()`` / ``.collect()``.

Each dynamic value is a small descriptor ``{virtualFileId, generation, afterSeq, uptoSeq, index}``,
not rows (research/etl.md §6): descriptors go through the IO manager cheaply, and each mapped step
re-reads exactly its range, so a retried step gets the same rows and no cursor state is shared.
"""

from collections.abc import Iterator, Mapping
from typing import Any

import dagster as dg

from connector_ops.kernel.errors import ConnectorError, InvalidInput
from connector_ops.kernel.limits import MAX_BATCH_SIZE, MAX_BATCHES
from connector_ops.kernel.settings import count_setting
from connector_ops.ops.factory import ensure_launched_definition, failure
from connector_ops.ops.metadata import output_metadata, read_metadata
from connector_ops.registry import error_for, get_action
from connector_ops.resources.virtual_files.store import VirtualFileStore


class BatchesConfig(dg.Config):
    virtualFileId: str | None = None
    maxBatchSize: int = 10_000


MAX_BATCHES_VARIABLE = "CONNECTOR_OPS_MAX_FOREACH_BATCHES"


def max_batches(environ: Mapping[str, str] | None = None) -> int:
    """The most batches one foreach step may run: ``CONNECTOR_OPS_MAX_FOREACH_BATCHES``, else
    :data:`MAX_BATCHES` (why that many). Read where the step runs: a pipeline that mails each of 5,000
    customers on its own (``maxBatchSize: 1``) is one a team may choose to run, knowingly."""
    return count_setting(MAX_BATCHES_VARIABLE, MAX_BATCHES, least=1, what="batches", environ=environ)


def check_batch_count(rows: int, batch_size: int, limit: int) -> None:
    """Refuse a fan-out of more than ``limit`` batches, naming the row count, the batch count, the smallest
    maxBatchSize that fits and the setting that raises the limit."""
    batches = -(-rows // batch_size)
    if batches > limit:
        raise InvalidInput("maxBatchSize", (
            f"{rows:,} rows in batches of {batch_size:,} are {batches:,} batches, more than the {limit:,} a "
            f"foreach step may run ({MAX_BATCHES_VARIABLE}); use a maxBatchSize of at least "
            f"{-(-rows // limit):,}"))


def plan_batches(store: VirtualFileStore, vf_id: str, batch_size: int) -> list[dict[str, Any]]:
    """The batches of ``vf_id``, refused before they are planned when there would be too many."""
    batch_size = min(batch_size, MAX_BATCH_SIZE)  # larger means "all"
    check_batch_count(store.summary(vf_id, 0)[0], batch_size, max_batches())  # a COUNT; the bounds query costs
    generation, bounds = store.batch_bounds(vf_id, batch_size)
    return [
        {"virtualFileId": vf_id, "generation": generation, "afterSeq": a, "uptoSeq": b, "index": i}
        for i, (a, b) in enumerate(bounds)
    ]


def read_batch(store: VirtualFileStore, batch: dict[str, Any]) -> list[dict[str, str]]:
    """The rows of one planned batch (the file must not have been replaced since planning)."""
    return store.read_range(batch["virtualFileId"], batch["afterSeq"], batch["uptoSeq"], batch["generation"])


@dg.op(
    out=dg.DynamicOut(dict),
    ins={"virtual_file_id": dg.In(dg.Any, default_value=None), "after": dg.In(dg.Nothing)},
    tags={"connector": "etl", "action": "etl.iterate"},
)
def etl_iterate_batches(
    context: dg.OpExecutionContext, config: BatchesConfig, virtual_files: dg.ResourceParam[VirtualFileStore],
    virtual_file_id: Any,
) -> Iterator[dg.DynamicOutput]:
    """Split a virtual file into batches of at most maxBatchSize rows, one dynamic output each."""
    ensure_launched_definition(context)
    vf_id = virtual_file_id or config.virtualFileId
    spec = get_action("etl.iterate")
    if not vf_id:
        raise failure(ConnectorError(400, {"message": "virtualFileId: is required"}, action=spec.name))
    if config.maxBatchSize < 1:
        raise failure(ConnectorError(400, {"message": "maxBatchSize: must be at least 1"}, action=spec.name))
    try:
        batches = plan_batches(virtual_files, vf_id, config.maxBatchSize)
    except Exception as exc:
        raise failure(error_for(spec, exc)) from exc
    read = read_metadata({"virtualFileId": vf_id})  # what gc keeps for the job's latest successful run
    for batch in batches:
        yield dg.DynamicOutput(batch, mapping_key=f"b{batch['index']:05d}", metadata=read)


@dg.op(tags={"connector": "etl", "action": "etl.iterate"})
def etl_batch_rows(
    context: dg.OpExecutionContext, virtual_files: dg.ResourceParam[VirtualFileStore], batch: dict
) -> list:
    """The rows of one batch planned by ``etl_iterate_batches`` (a list of row objects)."""
    ensure_launched_definition(context)
    try:
        rows = read_batch(virtual_files, batch)
    except Exception as exc:
        raise failure(error_for(get_action("etl.iterate"), exc)) from exc
    context.add_output_metadata(output_metadata("", rows, {}))
    return rows
