"""Every action as a Dagster op (op name = ``<connector>_<action>``), built by one factory.

``from connector_ops.ops import etl_push, etl_query`` …; see :mod:`connector_ops.op_factory` for how
config, wired inputs, outputs, metadata and failures work.
"""

from __future__ import annotations

import dagster as dg

from connector_ops.etl.fanout import etl_batch_rows, etl_iterate_batches
from connector_ops.op_factory import build_op
from connector_ops.registry import ACTIONS, load_all

etl_push = build_op("etl.push")
etl_pull = build_op("etl.pull")
etl_iterate = build_op("etl.iterate")
etl_query = build_op("etl.query")
etl_append_rows = build_op("etl.append_rows")
etl_clean = build_op("etl.clean")


def all_ops() -> dict[str, dg.OpDefinition]:
    """Every action op by op name (the ones above and those of connectors registered later)."""
    load_all()
    ops = {o.name: o for o in globals().values() if isinstance(o, dg.OpDefinition)}
    for spec in ACTIONS.values():
        if spec.op_name not in ops:
            ops[spec.op_name] = build_op(spec.name)
    return ops


__all__ = [
    "all_ops",
    "etl_append_rows",
    "etl_batch_rows",
    "etl_clean",
    "etl_iterate",
    "etl_iterate_batches",
    "etl_pull",
    "etl_push",
    "etl_query",
]
