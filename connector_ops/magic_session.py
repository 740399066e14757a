"""Which resources the notebook magics use: the environment, a ``Definitions`` object, session settings.

``%connectors use connector_ops.pipelines:defs`` takes the resources bound in a Dagster ``Definitions`` (so a notebook
runs against exactly what the deployment runs against); their ``EnvVar`` fields are resolved, and the
resources set up, with ``dagster.build_resources`` — the same path a run takes. ``%connectors use env``
goes back to :func:`connector_ops.environment.resources_for`, the default.

``%connectors set`` changes settings for this session only, on top of either source:

* ``NAME=value`` with an upper-case environment variable (``CONNECTOR_OPS_DRIVE_BACKEND=local``,
  ``MAILJET_API_KEY=…``) overrides the environment the resources are built from;
* ``field=value`` or ``resource.field=value`` (``database_url=…``, ``platform_files.files_dir=…``)
  overrides one field of a resource (the resource holding that field, when only one does).

Resources are built once and reused until the source, a setting or a connector variable of the process
environment changes, which keeps a magic call cheap.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from connector_ops.display import StatusTable
from connector_ops.environment import (
    RESOURCE_KEYS,
    SECRET_VARIABLES,
    absolute_paths,
    masked_environment,
    process_environ,
    resources_for,
)
from connector_ops.kernel.errors import ConnectorError, ConnectorOpsError, InvalidInput
from connector_ops.kernel.secrets import MASK
from connector_ops.kernel.secrets import masked as mask_setting
from connector_ops.registry import describe_validation_error

ENV_PREFIXES = ("CONNECTOR_OPS_", "GOOGLE_", "MAILJET_", "SMTP_")
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


class SessionError(ConnectorError):
    """A ``%connectors`` command that cannot be carried out (status 400)."""

    def __init__(self, message: str) -> None:
        super().__init__(400, {"message": message}, action="connectors")


def masked(field: str, value: Any, secrets: frozenset[str]) -> Any:
    """A setting as ``%connectors`` shows it: secrets replaced by ``****``, URL passwords hidden."""
    env_var_name = getattr(value, "env_var_name", None)  # a dagster.EnvVar of a Definitions' resource
    if env_var_name is not None:
        return f"EnvVar({env_var_name!r})"
    if isinstance(value, str) and value in secrets:
        return MASK
    return mask_setting(field, value)


_ERROR_LINE = re.compile(r"^[\w.]*(?:Error|Exception): (.+)$")


def one_line(exc: BaseException) -> str:
    """Dagster's config errors span lines and include stack traces; keep the line that says what is wrong."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        match = _ERROR_LINE.match(line)
        if match:
            return match.group(1)
    return lines[0] if lines else type(exc).__name__


def load_object(target: str) -> Any:
    """``module:attr`` or ``module`` (then its ``defs``) -> the object."""
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SessionError(f"cannot import {module_name!r}: {exc}") from None
    attr = attr or "defs"
    try:
        return getattr(module, attr)
    except AttributeError:
        raise SessionError(f"{module_name!r} has no attribute {attr!r}") from None


def _fields(resource: Any) -> dict[str, Any]:
    model_fields = getattr(type(resource), "model_fields", None)
    return {name: getattr(resource, name) for name in model_fields} if model_fields else {}


class NotebookSession:
    """The resources the magics run with, and the notebook's settings (``%connectors``).

    Built with :func:`connector_ops.environment.resources_for` like every entry point; on top of
    :class:`connector_ops.session.Session` it can take a Dagster ``Definitions``' resources and hold
    session settings (variables, resource fields), and it closes what it built when they change.
    """

    def __init__(self) -> None:
        self.definitions: Any = None
        self.definitions_target: str | None = None
        self.env_overrides: dict[str, str] = {}
        self.field_overrides: dict[tuple[str, str], str] = {}
        self._key: Any = None
        self._resources: dict[str, Any] | None = None
        self._stack = contextlib.ExitStack()

    # -- sources and settings ------------------------------------------------------------------------
    def use(self, target: str) -> None:
        """Take resources from ``target`` (``pkg.module:defs``), or from the environment (``env``)."""
        if target in ("env", "environment"):
            self.definitions, self.definitions_target = None, None
        else:
            from connector_ops.ops.resources import is_definitions

            defs = load_object(target)
            if not is_definitions(defs):
                raise SessionError(f"{target} is a {type(defs).__name__}, not a dagster Definitions")
            self.definitions, self.definitions_target = defs, target
        self._invalidate()

    def set(self, assignments: list[str]) -> None:
        """Apply ``NAME=value`` / ``[resource.]field=value`` settings (an empty value removes one)."""
        if not assignments:
            raise SessionError("nothing to set; write %connectors set database_url=sqlite:///my.db")
        saved = dict(self.env_overrides), dict(self.field_overrides)
        try:
            self._apply(assignments)
            self._unresolved()  # a value the resource refuses is reported now, and not kept
        except Exception as exc:
            self.env_overrides, self.field_overrides = saved
            if isinstance(exc, SessionError):
                raise
            given = [a.partition("=")[0] for a in assignments]  # never echo values: they may be secret
            setting = exc.__cause__
            if isinstance(setting, InvalidInput) and setting.field in given:  # it names the setting itself
                raise SessionError(f"cannot set {setting}") from None
            # a ConnectorError's own message: its str() carries a status of its own ('failed (500): …')
            problem = describe_validation_error(exc) if isinstance(exc, ValidationError) \
                else exc.message if isinstance(exc, ConnectorError) else str(exc)
            field = given[0].rpartition(".")[2]  # the resource's own check names its field: said once
            if len(given) == 1 and problem.startswith(f"{field}: "):
                problem = problem.removeprefix(f"{field}: ")
            raise SessionError(f"cannot set {', '.join(given)}: {problem}") from None
        finally:
            self._invalidate()

    def _apply(self, assignments: list[str]) -> None:
        for assignment in assignments:
            name, sep, value = assignment.partition("=")
            name = name.strip()
            if not sep or not name:
                raise SessionError(f"{assignment!r}: write NAME=value")
            if _ENV_NAME.fullmatch(name):
                self._assign(self.env_overrides, name, value)
            else:
                self._assign(self.field_overrides, self._field_target(name), value)
        # a relative path is the one in the folder of this cell, whatever %cd comes after
        self.env_overrides.update(absolute_paths(self.env_overrides))

    @staticmethod
    def _assign(target: dict[Any, str], key: Any, value: str) -> None:
        if value == "":
            target.pop(key, None)
        else:
            target[key] = value

    def reset(self) -> None:
        """Back to the environment, without session settings."""
        self.definitions, self.definitions_target = None, None
        self.env_overrides.clear()
        self.field_overrides.clear()
        self._invalidate()

    def _field_target(self, name: str) -> tuple[str, str]:
        """``database_url`` -> ``("virtual_files", "database_url")``; ``key.field`` as given."""
        resources = self._unresolved()
        if "." in name:
            key, field = name.split(".", 1)
            if key not in resources:
                raise SessionError(f"{name}: no resource {key!r}; resources are {', '.join(sorted(resources))}")
            if field not in _fields(resources[key]):
                raise SessionError(f"{name}: {key} has no field {field!r}; fields: "
                                   f"{', '.join(_fields(resources[key]))}")
            return key, field
        owners = [key for key, resource in resources.items() if name in _fields(resource)]
        if len(owners) == 1:
            return owners[0], name
        if owners:
            raise SessionError(f"{name}: several resources have this field ({', '.join(owners)}); "
                               f"write RESOURCE.{name}=…")
        settable = sorted(f"{k}.{f}" for k, r in resources.items() for f in _fields(r))
        raise SessionError(f"{name}: no resource has this field; settable: {', '.join(settable)}")

    # -- building ------------------------------------------------------------------------------------
    def environ(self) -> dict[str, str]:
        return {**process_environ(), **self.env_overrides}

    def _unresolved(self, keys: Iterable[str] = RESOURCE_KEYS) -> dict[str, Any]:
        """The resources of ``keys`` before ``EnvVar`` resolution and setup, with field settings applied.

        Only ``keys`` are read from the environment, so a bad setting of another connector (say
        ``CONNECTOR_OPS_MAIL_BACKEND=bogus``) never breaks an ``%etl`` cell; a bad one of these is a
        one-line configuration error (500, as ``invoke()`` says it)."""
        if self.definitions is not None:
            resources = {k: v for k, v in (self.definitions.resources or {}).items() if k in set(keys)}
        else:
            try:
                resources = resources_for(keys, self.environ())
            except ConnectorOpsError as exc:  # the setting's own error stays the cause: ``set`` words it alone
                raise ConnectorError(500, {"message": f"configuration error: {exc}"}) from exc
        by_key: dict[str, dict[str, str]] = {}
        for (key, field), value in self.field_overrides.items():
            by_key.setdefault(key, {})[field] = value
        for key, changes in by_key.items():
            if key in resources:
                resource = resources[key]
                resources[key] = type(resource)(**{**_fields(resource), **changes})
        return resources

    def _cache_key(self) -> tuple[Any, ...]:
        watched = tuple(sorted((k, v) for k, v in process_environ().items() if k.startswith(ENV_PREFIXES)))
        return (id(self.definitions), watched, tuple(sorted(self.env_overrides.items())),
                tuple(sorted(self.field_overrides.items())))

    def resources(self, keys: Iterable[str] = RESOURCE_KEYS) -> dict[str, Any]:
        """The live resources of ``keys``, built on first use and kept until something they depend on
        changes; then they are closed and rebuilt."""
        key = self._cache_key()
        if self._resources is None or key != self._key:
            self._invalidate()
            self._resources, self._key = {}, key
        missing = [k for k in keys if k not in self._resources]
        if missing:
            self._resources.update(self._build(missing))
        return {k: self._resources[k] for k in keys if k in self._resources}

    def _build(self, keys: list[str]) -> dict[str, Any]:
        unresolved = self._unresolved(keys)
        if self.definitions is None:
            for resource in unresolved.values():
                self._stack.callback(resource.close)
            return unresolved
        from connector_ops.ops.resources import build_resources

        with self._environment_overrides():
            try:
                built = self._stack.enter_context(build_resources(unresolved))
            except Exception as exc:  # e.g. an EnvVar whose variable is not set
                raise SessionError(f"resources of {self.definitions_target} cannot be built: "
                                   f"{one_line(exc)}") from None
        return {k: getattr(built, k) for k in unresolved}

    @contextlib.contextmanager
    def _environment_overrides(self) -> Any:
        """``EnvVar`` fields are read from ``os.environ``: apply the session's variables meanwhile."""
        saved = {k: os.environ.get(k) for k in self.env_overrides}
        os.environ.update(self.env_overrides)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def _invalidate(self) -> None:
        self._stack.close()
        self._stack = contextlib.ExitStack()
        self._resources, self._key = None, None

    close = _invalidate

    # -- showing -------------------------------------------------------------------------------------
    def status(self) -> StatusTable:
        """What ``%connectors`` shows: source, settings and every resource's configuration, masked."""
        environ = self.environ()
        secrets = frozenset(v for k, v in environ.items() if k in SECRET_VARIABLES and v)
        rows = []
        for key, resource in sorted(self.resources().items()):
            settings = ", ".join(f"{f}={masked(f, v, secrets)}" for f, v in _fields(resource).items())
            rows.append({"resource": key, "type": type(resource).__name__, "settings": settings})
        source = f"Definitions {self.definitions_target}" if self.definitions is not None else "environment"
        notes = [f"source: {source}"]
        if self.env_overrides:
            shown = masked_environment(self.env_overrides)
            notes.append("session variables: " + ", ".join(f"{k}={v}" for k, v in shown.items()))
        if self.field_overrides:
            notes.append("session settings: " + ", ".join(
                f"{k}.{f}={masked(f, v, secrets)}" for (k, f), v in sorted(self.field_overrides.items())))
        variables = masked_environment(environ)
        if variables:
            notes.append("environment: " + ", ".join(f"{k}={v}" for k, v in variables.items()))
        return StatusTable("connector-ops resources", rows, notes)

