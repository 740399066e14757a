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

ASSET_FILE_PREFIX = "asset:"
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


def publish(field: str, value: Any, key: dg.AssetKey, resources: Mapping[str, Any]) -> Any:
    """An asset's data as readers will find it: a virtual file becomes (replaces) the asset's named file;
    a platform file stays as it is (a new file per materialisation; ``connector-ops gc`` removes old ones)."""
    if field in VIRTUAL_FILE_OUTPUTS and isinstance(value, str) and "virtual_files" in resources:
        return resources["virtual_files"].publish(asset_file_name(key), value)
    return value
