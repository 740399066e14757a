"""connector-ops: cloud drive, transactional e-mail and ETL connectors as Dagster ops.

``invoke("etl.push", {...})`` runs an action with resources from the environment; the same action code
backs the Dagster ops (:mod:`connector_ops.ops`), the CLI and the ``%etl``/``%drive``/``%mail`` magics.

Importing the package imports nothing else: names are resolved on first use (PEP 562), so
``connector-ops --help`` or a module of the kernel never pays for pydantic, SQLAlchemy or Dagster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from connector_ops.frames import pull_frame, push_frame
    from connector_ops.kernel.errors import ConnectorError
    from connector_ops.progress_bars import progress
    from connector_ops.session import Session, invoke

__all__ = ["ConnectorError", "Session", "invoke", "load_ipython_extension", "progress", "pull_frame", "push_frame"]

_LAZY = {
    "ConnectorError": "connector_ops.kernel.errors",
    "invoke": "connector_ops.session",
    "Session": "connector_ops.session",
    "push_frame": "connector_ops.frames",
    "pull_frame": "connector_ops.frames",
    "progress": "connector_ops.progress_bars",
}

#: The IPython extensions ``%load_ext connector_ops`` loads: the action magics, then ``%pipeline``.
EXTENSIONS = ("connector_ops.magic", "connector_ops.pipelines.magic")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'connector_ops' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names and the lazy ones: ``dir()`` and IPython's Tab completion list only what
    ``__dir__`` returns, and without it they would hide the whole public API until its first use."""
    return sorted(set(globals()) | set(__all__))


def load_ipython_extension(ipython: Any) -> None:  # pragma: no cover - exercised through %load_ext
    """The magics, with Stop held back while they load (:mod:`connector_ops.kernel.deferred`), and pandas
    loaded with them: the first output shown would import it (and numpy, pyarrow), and a Stop that cut that
    import in half left the kernel unable to show a table ("partially initialized module 'pandas'")."""
    from connector_ops.kernel.deferred import interrupts_deferred

    with interrupts_deferred():
        import pandas  # noqa: F401
        for extension in EXTENSIONS:
            ipython.extension_manager.load_extension(extension)
