"""Named virtual files: an asset's data keeps one id across re-materialisations (an extension of the spec).

A step that materialises an asset makes a new virtual file as usual; the file then *replaces* the rows of
the asset's named file ``asset:<key>`` (``asset:sales/orders``) in one transaction
(:meth:`VirtualFileStore.publish`), and that name is what the step passes on and the materialisation
records. Readers — the next steps, downstream assets, a notebook's ``%etl query asset:sales/orders`` —
read either the previous rows or the new ones, never a mix, and the store holds one table per asset
instead of one per run.
"""

from collections.abc import Mapping
from typing import Any

import dagster as dg

from connector_ops.kernel.errors import ConnectorError
from connector_ops.resources.virtual_files.catalog import ASSET_FILE_PREFIX

VIRTUAL_FILE_OUTPUTS = ("virtualFileId", "validated")
_ID_LIMIT = 64  # the catalog's id column
#: the longest asset key (``a/b`` as written) whose virtual file can be named
MAX_KEY_CHARS = _ID_LIMIT - len(ASSET_FILE_PREFIX)


def asset_file_name(key: dg.AssetKey) -> str:
    """The name of the virtual file holding ``key``'s data; each materialisation replaces its rows."""
    name = ASSET_FILE_PREFIX + "/".join(key.path)
    if len(name) > _ID_LIMIT:
        raise ValueError(f"asset key {key.to_user_string()!r} is too long to name its virtual file "
                         f"({len(name)} characters with {ASSET_FILE_PREFIX!r}; at most {_ID_LIMIT})")
    return name


#: input flag -> the input field whose virtual file the action changes in place when the flag is true
IN_PLACE_FLAGS = {"overwriteVirtualFile": "virtualFileId"}
#: output field -> the input field that must be a virtual file id for the output to be one (Validate: rows
#: in, rows out; an asset's data is a file, not rows written into its materialisation)
FILE_ONLY_FROM = {"validated": "content"}


def file_input_problem(field: str, value: Any) -> str | None:
    """Why output ``field`` cannot be an asset's virtual file when its input field holds ``value``."""
    source = FILE_ONLY_FROM.get(field)
    if source is None or isinstance(value, str):
        return None
    return (f"{source}: an asset's data is a virtual file, and `{field}` is one only when `{source}` is a "
            f"virtual file id (e.g. ${{load.virtualFileId}}), not a {type(value).__name__} of rows; load the rows "
            "first (etl.push), or drop `asset:`")


def in_place_problem(payload: Mapping[str, Any], key: dg.AssetKey) -> str | None:
    """Why the asset step making ``key`` must not run with ``payload``: it would change in place (and then
    publish, i.e. take over) the named file of another asset. ``None`` when it may run. The step's own
    named file is fine (it replaces its own rows)."""
    for flag, target in IN_PLACE_FLAGS.items():
        source = payload.get(target)
        if payload.get(flag) is True and isinstance(source, str) and source.startswith(ASSET_FILE_PREFIX) \
                and source != asset_file_name(key):
            return (f"{flag}: true would change virtual file {source!r} in place, the data of asset "
                    f"{source[len(ASSET_FILE_PREFIX):]}; set {flag}: false so that asset "
                    f"{key.to_user_string()} gets a virtual file of its own")
    return None


def check_asset_input(field: str, payload: Mapping[str, Any], key: dg.AssetKey) -> None:
    """Refuse (400, before the action runs) an input with which the step making asset ``key`` of its output
    ``field`` would change another asset's data (an asset step never changes or takes another asset's named
    file), or would make no virtual file at all (Validate of rows)."""
    source = FILE_ONLY_FROM.get(field)
    problem = in_place_problem(payload, key) or (file_input_problem(field, payload.get(source)) if source else None)
    if problem is not None:
        raise ConnectorError(400, {"message": problem})


def publish(field: str, value: Any, key: dg.AssetKey, resources: Mapping[str, Any]) -> Any:
    """An asset's data as readers will find it: a virtual file becomes (replaces) the asset's named file;
    a platform file stays as it is (a new file per materialisation; ``connector-ops gc`` removes old ones).

    A virtual file that is another asset's named file is refused (409), not moved nor copied: moving would
    delete that asset's data under its recorded materialisation; a copy would hide that the step made no
    file of its own (it passed on, or changed, the other asset's data)."""
    if field in VIRTUAL_FILE_OUTPUTS and isinstance(value, str) and "virtual_files" in resources:
        name = asset_file_name(key)
        if value.startswith(ASSET_FILE_PREFIX) and value != name:
            raise ConnectorError(409, {"message": f"{field} is virtual file {value!r}, the data of asset "
                                                  f"{value[len(ASSET_FILE_PREFIX):]}; asset {key.to_user_string()} "
                                                  "needs a virtual file of its own, the other asset's is kept"})
        return resources["virtual_files"].publish(name, value)
    return value
