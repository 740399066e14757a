"""Every action as a Dagster op (op name = ``<connector>_<action>``), built by one factory.

``from connector_ops.ops import etl_push, etl_query`` …; see :mod:`connector_ops.ops.factory` for how
config, wired inputs, outputs, metadata and failures work.
"""

from __future__ import annotations

import dagster as dg

from connector_ops.ops.factory import build_op
from connector_ops.ops.fanout import etl_batch_rows, etl_iterate_batches
from connector_ops.registry import ACTIONS, load_all

etl_push = build_op("etl.push")
etl_pull = build_op("etl.pull")
etl_iterate = build_op("etl.iterate")
etl_query = build_op("etl.query")
etl_append_rows = build_op("etl.append_rows")
etl_clean = build_op("etl.clean")
etl_map = build_op("etl.map")
etl_validate = build_op("etl.validate")
etl_join = build_op("etl.join")
etl_delete_rows = build_op("etl.delete_rows")
drive_rename = build_op("drive.rename")
drive_create_file = build_op("drive.create_file")
drive_move = build_op("drive.move")
drive_delete_file = build_op("drive.delete_file")
drive_create_shared_link = build_op("drive.create_shared_link")
drive_copy_file = build_op("drive.copy_file")
drive_create_folder = build_op("drive.create_folder")
drive_upload_file = build_op("drive.upload_file")
drive_download_file = build_op("drive.download_file")
drive_list = build_op("drive.list")
drive_delete_folder = build_op("drive.delete_folder")
mail_send_transactional_message = build_op("mail.send_transactional_message")


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
    "drive_copy_file",
    "drive_create_file",
    "drive_create_folder",
    "drive_create_shared_link",
    "drive_delete_file",
    "drive_delete_folder",
    "drive_download_file",
    "drive_list",
    "drive_move",
    "drive_rename",
    "drive_upload_file",
    "etl_append_rows",
    "etl_batch_rows",
    "etl_clean",
    "etl_delete_rows",
    "etl_iterate",
    "etl_iterate_batches",
    "etl_join",
    "etl_map",
    "etl_pull",
    "etl_push",
    "etl_query",
    "etl_validate",
    "mail_send_transactional_message",
]
