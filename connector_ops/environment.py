"""Resources from the environment: the configuration contract of design.md, in one place.

Two callers: :func:`connector_ops.invoke` / CLI / magic want live values read *now*
(``resources_from_env()``), while ``pipelines.Definitions`` wants secrets as ``dagster.EnvVar`` so they
are read inside the run and never stored in run config or events (``resources_from_env(deferred=True)``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import dagster as dg

#: Variables whose value is secret: passed as EnvVar in Definitions, masked by ``%connectors``.
SECRET_VARIABLES = frozenset(
    {
        "CONNECTOR_OPS_DATABASE_URL",
        "GOOGLE_CLIENT_SECRET",
        "GOOGLE_REFRESH_TOKEN",
        "MAILJET_API_KEY",
        "MAILJET_API_SECRET",
        "SMTP_PASSWORD",
    }
)

DEFAULT_FILE_SERVER_URL = "http://127.0.0.1:8765"


class Env:
    """A view of the environment that knows defaults and how to hand out secrets."""

    def __init__(self, environ: Mapping[str, str] | None = None, *, deferred: bool = False) -> None:
        self.environ = dict(os.environ if environ is None else environ)
        self.deferred = deferred

    def get(self, name: str, default: str | None = None) -> str | None:
        value = self.environ.get(name)
        return value if value not in (None, "") else default

    def value(self, name: str, default: Any = None) -> Any:
        """The variable's value, or ``EnvVar(name)`` when resolving is deferred to the run."""
        if self.get(name) is None:
            return default
        return dg.EnvVar(name) if self.deferred else self.environ[name]

    def flag(self, name: str, default: bool = False) -> bool:
        value = self.get(name)
        return default if value is None else value.strip().lower() in {"1", "true", "yes", "on"}

    @property
    def home(self) -> Path:
        return Path(self.get("CONNECTOR_OPS_HOME", ".connector_ops")).expanduser().resolve()

    def path(self, name: str, default_child: str) -> str:
        return str(Path(self.get(name) or self.home / default_child).expanduser().resolve())


#: key -> builder(Env) -> resource; connectors add theirs with :func:`resource_builder`.
RESOURCE_BUILDERS: dict[str, Callable[[Env], Any]] = {}


def resource_builder(key: str) -> Callable[[Callable[[Env], Any]], Callable[[Env], Any]]:
    def register(fn: Callable[[Env], Any]) -> Callable[[Env], Any]:
        RESOURCE_BUILDERS[key] = fn
        return fn

    return register


_builders_loaded = False


def _load_builders() -> None:
    global _builders_loaded
    if _builders_loaded:
        return
    import importlib

    for module in ("resources.platform_files", "resources.virtual_files", "resources.drive", "resources.mail"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:  # a connector not built yet
            if not module.startswith(exc.name or "-"):
                raise
    _builders_loaded = True


def resources_from_env(environ: Mapping[str, str] | None = None, *, deferred: bool = False,
                       keys: Iterable[str] | None = None) -> dict[str, Any]:
    """Build the resources (``platform_files``, ``virtual_files``, ``drive``, ``mail``; or only ``keys``)
    from ``environ``. A bad setting raises ``InvalidInput`` naming the variable."""
    _load_builders()
    env = Env(environ, deferred=deferred)
    wanted = RESOURCE_BUILDERS.keys() if keys is None else keys
    return {key: RESOURCE_BUILDERS[key](env) for key in wanted if key in RESOURCE_BUILDERS}


def masked_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The connector variables that are set, secrets masked by the one rule of :mod:`connector_ops.secrets`
    (a secret URL such as the database's keeps everything but its password readable)."""
    from connector_ops.secrets import MASK, mask_url, masked

    def shown(name: str, value: str) -> str:
        if name in SECRET_VARIABLES:
            return mask_url(value) if "://" in value else MASK
        return masked(name, value)

    env = os.environ if environ is None else environ
    prefixes = ("CONNECTOR_OPS_", "GOOGLE_", "MAILJET_", "SMTP_")
    return {k: shown(k, v) for k, v in sorted(env.items()) if k.startswith(prefixes)}
