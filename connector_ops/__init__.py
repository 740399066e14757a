"""connector-ops: cloud drive, transactional e-mail and ETL connectors as Dagster ops.

``invoke("etl.push", {...})`` runs an action with resources from the environment; the same action code
backs the Dagster ops (:mod:`connector_ops.ops`), the CLI and the ``%etl``/``%drive``/``%mail`` magics.
"""

from connector_ops.errors import ConnectorError
from connector_ops.registry import invoke

__all__ = ["ConnectorError", "invoke", "load_ipython_extension"]


def load_ipython_extension(ipython):  # pragma: no cover - exercised through %load_ext
    from connector_ops.magic import load_ipython_extension as load

    load(ipython)
