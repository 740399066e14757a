"""Dagster types of the values that move between steps: a ``platformFile`` and a virtual file id.

Op outputs and wirable inputs carry them, so the UI shows what flows along each edge, and a wrong wiring
in a Python graph (a platform file into ``virtual_file_id``) fails at that input with a message naming
both, before the action runs (:func:`type_check_error`: a 400 naming the field; the value, rows perhaps, is
not quoted). YAML pipelines are checked earlier, when they load (:mod:`connector_ops.pipelines.dsl.validate`).
An unwired input (``None``) always passes.
"""

import re
from typing import Any

import dagster as dg

from connector_ops.kernel.errors import ConnectorError
from connector_ops.registry import FIELD_KINDS, WIRABLE_FIELDS

#: Dagster's message of a failed input type check: the op input's name and the check's description
_FAILED_CHECK = re.compile(r'Type check failed for step input "(?P<input>[^"]+)".*?Description: (?P<why>.*)', re.S)


def _platform_file(_context: Any, value: Any) -> dg.TypeCheck:
    if value is None or (isinstance(value, dict) and ("link" in value or "id" in value)):
        return dg.TypeCheck(success=True)
    kind = "a virtual file id" if isinstance(value, str) else type(value).__name__
    return dg.TypeCheck(success=False, description=f"expected a platform file (an object with a link), got {kind}")


def _virtual_file_id(_context: Any, value: Any) -> dg.TypeCheck:
    if value is None or (isinstance(value, str) and value):
        return dg.TypeCheck(success=True)
    kind = "a platform file" if isinstance(value, dict) and "link" in value else type(value).__name__
    return dg.TypeCheck(success=False, description=f"expected a virtual file id (a string), got {kind}")


PlatformFileType = dg.DagsterType(name="PlatformFile", type_check_fn=_platform_file,
                                  description="a platformFile: id, name, contentType, link, size, lastModified")
VirtualFileIdType = dg.DagsterType(name="VirtualFileId", type_check_fn=_virtual_file_id,
                                   description="the id of a virtual file (rows in the ETL store)")
TYPES = {"platform file": PlatformFileType, "virtual file id": VirtualFileIdType}


def type_of(field: str) -> dg.DagsterType | Any:
    """The Dagster type of a spec field's value (``Any`` when its kind depends on the input)."""
    kind = FIELD_KINDS.get(field)
    return TYPES[kind] if kind else dg.Any


def type_check_error(error: Any) -> ConnectorError | None:
    """The 400 of a step whose wired input failed its type check (``error``: the failure's serialised error), or
    ``None`` for any other error: ``virtualFileId: expected a virtual file id (a string), got list`` instead of
    a 500 naming ``dagster._core.errors.DagsterTypeCheckDidNotPass``. The input is named as the spec names the
    field; the value is not quoted (rows of a customer file have no place in a run's error)."""
    if error is None or error.cls_name != "DagsterTypeCheckDidNotPass":
        return None
    found = _FAILED_CHECK.search(error.message or "")
    if found is None:
        return ConnectorError(400, {"message": "a wired input failed its type check"})
    fields = {name: field for field, name in WIRABLE_FIELDS.items()}
    field = fields.get(found["input"], found["input"])
    return ConnectorError(400, {"message": f"{field}: {found['why'].strip().splitlines()[0]}"})
