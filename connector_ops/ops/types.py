"""Dagster types of the values that move between steps: a ``platformFile`` and a virtual file id.

Op outputs and wirable inputs carry them, so the UI shows what flows along each edge, and a wrong wiring
in a Python graph (a platform file into ``virtual_file_id``) fails at that input with a message naming
both, before the action runs. YAML pipelines are checked earlier, when they load
(:mod:`connector_ops.pipelines.dsl.validate`). An unwired input (``None``) always passes.
"""

from typing import Any

import dagster as dg

from connector_ops.registry import FIELD_KINDS


def _platform_file(_context: Any, value: Any) -> dg.TypeCheck:
    if value is None or (isinstance(value, dict) and ("link" in value or "id" in value)):
        return dg.TypeCheck(success=True)
    kind = "a virtual file id" if isinstance(value, str) else type(value).__name__
    return dg.TypeCheck(success=False, description=f"expected a platform file (an object with a link), got {kind}"
                                                   f": {str(value)[:80]!r}")


def _virtual_file_id(_context: Any, value: Any) -> dg.TypeCheck:
    if value is None or (isinstance(value, str) and value):
        return dg.TypeCheck(success=True)
    kind = "a platform file" if isinstance(value, dict) and "link" in value else type(value).__name__
    return dg.TypeCheck(success=False, description=f"expected a virtual file id (a string), got {kind}: "
                                                   f"{str(value)[:80]!r}")


PlatformFileType = dg.DagsterType(name="PlatformFile", type_check_fn=_platform_file,
                                  description="a platformFile: id, name, contentType, link, size, lastModified")
VirtualFileIdType = dg.DagsterType(name="VirtualFileId", type_check_fn=_virtual_file_id,
                                   description="the id of a virtual file (rows in the ETL store)")
TYPES = {"platform file": PlatformFileType, "virtual file id": VirtualFileIdType}


def type_of(field: str) -> dg.DagsterType | Any:
    """The Dagster type of a spec field's value (``Any`` when its kind depends on the input)."""
    kind = FIELD_KINDS.get(field)
    return TYPES[kind] if kind else dg.Any
