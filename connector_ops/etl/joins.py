"""Join (spec 4.C): two virtual files joined in SQL into an output and a rejection virtual file.

The semantics and the SQL are in resources/virtual_files/joins.py; this module maps the spec's input
(``join.left/right`` with ``customId`` and ``key``, ``type``, ``outputSchema``) onto it.
"""

from __future__ import annotations

from connector_ops.etl import models as m
from connector_ops.kernel.progress import PHASE, track
from connector_ops.registry import action
from connector_ops.resources.virtual_files.shapes import Side
from connector_ops.resources.virtual_files.store import VirtualFileStore


def _side(side: m.JoinSide) -> Side:
    return Side(side.virtual_file_id, side.custom_id, side.key)


@action("etl.join", m.JoinInput, m.JoinOutput, resources=("virtual_files",), not_found_status=404)
def join(inp: m.JoinInput, virtual_files: VirtualFileStore) -> m.JoinOutput:
    """Join two virtual files on a key (INNER or LEFT); left rows without a partner go to the rejection file."""
    left, right = inp.join.left, inp.join.right
    # one SQL statement: a phase, kept alive by SQLite's progress handler (PostgreSQL: its end only)
    with track(f"join {left.virtual_file_id} × {right.virtual_file_id}: building output", None, PHASE):
        output, rejection = virtual_files.join(_side(left), _side(right), inp.join.type, inp.output_schema)
    return m.JoinOutput(rejection_file_id=rejection, virtual_file_id=output)
