"""Actions as Dagster assets: an asset factory over any action, and where an asset's data is.

An asset's data lives in our stores (a virtual file, a platform file); a materialisation records *where*
in its metadata (``virtual_file_id`` or ``platform_file``) next to Dagster's standard keys. A downstream
asset reads the location from the latest materialisation of its upstream asset, so assets made here and
assets declared by YAML pipeline steps (``asset:``) feed each other without an IO manager:

    sales = action_asset("sales/raw", "etl.push", {"platformFile": pf, "parameters": {...}}, group_name="sales")
    north = action_asset("sales/north_csv", "etl.pull", {"exportType": "csv", "exportName": "n.csv"},
                         inputs={"virtualFileId": "sales/raw"})
"""


import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import dagster as dg

from connector_ops.kernel.errors import ConnectorError
from connector_ops.kernel.progress import reporting_to
from connector_ops.ops.asset_files import asset_file_name, check_asset_input, publish
from connector_ops.ops.factory import POOLS, failure
from connector_ops.ops.metadata import LOCATION_KEYS, materialization_metadata, run_metadata
from connector_ops.ops.progress_log import step_progress
from connector_ops.registry import ActionSpec, get_action, run_action

#: the output that is an asset's data, first found among the action's outputs
ASSET_FIELDS = ("virtualFileId", "platformFile", "validated")


def asset_field(spec: ActionSpec) -> str | None:
    """The output of ``spec`` that can be an asset (``None``: the action produces no data to keep)."""
    return next((f for f in ASSET_FIELDS if f in spec.output_fields), None)


def latest_location(instance: dg.DagsterInstance, key: dg.AssetKey) -> Any:
    """Where the latest materialisation of ``key`` put its data (a virtual file id or a platform file)."""
    event = instance.get_latest_materialization_event(key)
    materialization = event.asset_materialization if event is not None else None
    if materialization is None:
        raise ConnectorError(400, {"message": f"asset {key.to_user_string()} has not been materialised yet"})
    for name in dict.fromkeys(LOCATION_KEYS.values()):
        if name in materialization.metadata:
            return materialization.metadata[name].value
    raise ConnectorError(400, {"message": f"asset {key.to_user_string()} records no virtual file or platform file"})


def action_asset(
    key: str | Sequence[str] | dg.AssetKey,
    action: str,
    input: Mapping[str, Any] | None = None,
    *,
    inputs: Mapping[str, str | Sequence[str] | dg.AssetKey] | None = None,
    group_name: str | None = None,
    description: str | None = None,
    owners: Sequence[str] | None = None,
    kinds: set[str] | None = None,
    retry_policy: dg.RetryPolicy | None = None,
) -> dg.AssetsDefinition:
    """An asset whose data is the virtual file or platform file ``action`` makes from ``input``.

    ``inputs`` maps input fields to upstream assets: at run time each field gets where the upstream's
    latest materialisation put its data, and the asset graph draws the lineage. A string key may use
    ``/`` between parts (``sales/raw``). Failures are the actions' (status, body; retried only when
    transient); Drive and mail assets run in the providers' pools.
    """
    spec = get_action(action)
    field = asset_field(spec)
    if field is None:
        raise ValueError(f"{spec.name} produces no virtual file or platform file to be an asset")
    key = asset_key(key)
    asset_file_name(key)  # a key too long to name its virtual file fails here, not in the first run
    upstream = {name: asset_key(k) for name, k in (inputs or {}).items()}
    literal = dict(input or {})

    @dg.multi_asset(
        name=key.to_python_identifier(),
        specs=[dg.AssetSpec(key, deps=list(upstream.values()), group_name=group_name,
                            description=description or f"`{field}` of {spec.name}: {spec.summary}",
                            owners=list(owners) if owners else None, kinds=kinds,
                            metadata={"action": spec.name})],
        required_resource_keys=set(spec.resource_keys),
        retry_policy=retry_policy,
        pool=POOLS.get(spec.connector),
        op_tags={"connector": spec.connector, "action": spec.name},
    )
    def compute(context: dg.AssetExecutionContext) -> Iterator[dg.MaterializeResult]:
        resources = {k: getattr(context.resources, k) for k in spec.resource_keys}
        payload = dict(literal)
        started = time.perf_counter()
        try:
            for name, up in upstream.items():
                payload[name] = latest_location(context.instance, up)
            check_asset_input(field, payload, key)
            with reporting_to(step_progress(context.log.info)):
                result = run_action(spec, payload, resources)
            data = publish(field, result[field], key, resources)
        except ConnectorError as exc:
            exc.action = exc.action or spec.name
            raise failure(exc, payload) from None
        metadata = {**materialization_metadata(field, data, resources),
                    **run_metadata(payload, time.perf_counter() - started)}
        yield dg.MaterializeResult(asset_key=key, metadata=metadata)

    return compute


def asset_key(key: str | Sequence[str] | dg.AssetKey) -> dg.AssetKey:
    """An ``AssetKey`` from a key, a list of parts, or a string with ``/`` between parts."""
    if isinstance(key, dg.AssetKey):
        return key
    if isinstance(key, str):
        return dg.AssetKey(key.split("/"))
    return dg.AssetKey(list(key))
