"""Resources from the environment: the configuration contract of design.md, in one place.

The environment is read into :class:`Recipe` objects (a resource class and its settings); a secret is a
:class:`EnvRef`, the *name* of its variable, so that whoever turns a recipe into something long-lived
decides when the value is read: :meth:`Recipe.build` reads it now (``invoke()``, the CLI, the magics),
the Dagster adapters pass it on as ``dagster.EnvVar`` so it is read inside the run and never stored in
run config or events (``connector_ops.ops.resources.dagster_resources``).

Builders are listed explicitly in :data:`BUILDERS`; each imports its resource module when called, so an
action pays only for the resources it uses, and a bad setting of one connector never breaks another.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from connector_ops.kernel.disk import min_free_disk
from connector_ops.kernel.errors import ConfigurationError
from connector_ops.kernel.folders import unwritable
from connector_ops.kernel.resource import Resource
from connector_ops.kernel.secrets import mask_secret, masked

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

#: The keys of the resources, in the order ``%connectors`` shows them.
RESOURCE_KEYS = ("platform_files", "virtual_files", "drive", "mail")


#: the spellings of a boolean setting (:meth:`Env.flag`)
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class EnvRef:
    """A setting that is the value of the environment variable ``name``, read where the resource is built."""

    name: str


class Env:
    """A view of the environment that knows the defaults."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = dict(os.environ if environ is None else environ)

    @overload
    def get(self, name: str, default: None = None) -> str | None: ...
    @overload
    def get(self, name: str, default: str) -> str: ...

    def get(self, name: str, default: str | None = None) -> str | None:
        """The variable's value; unset or empty is ``default`` (so a ``str`` default gives a ``str``)."""
        value = self.environ.get(name)
        return value if value not in (None, "") else default

    def secret(self, name: str, default: Any = None) -> EnvRef | Any:
        """``EnvRef(name)`` when the variable is set (the value itself never enters a recipe)."""
        return default if self.get(name) is None else EnvRef(name)

    def flag(self, name: str, default: bool = False) -> bool:
        """A boolean setting; any other spelling is refused, naming the variable: a typo such as
        ``MAILJET_SANDBOX=ture`` must not silently mean the opposite of what was meant."""
        value = self.get(name)
        if value is None:
            return default
        word = value.strip().lower()
        if word not in TRUE_WORDS | FALSE_WORDS:
            raise ConfigurationError(name, f"must be true or false ({'/'.join(sorted(TRUE_WORDS))} or "
                                     f"{'/'.join(sorted(FALSE_WORDS))}), got {value!r}")
        return word in TRUE_WORDS

    def choice(self, name: str, default: str, choices: Iterable[str]) -> str:
        """The setting ``name`` as one of ``choices`` (any case, spaces around ignored); refused naming the
        setting, the value as it was written and the values allowed."""
        given = self.get(name) or default
        value = given.strip().lower()
        if value not in choices:
            raise ConfigurationError(name, f"must be one of {', '.join(choices)}, got {given!r}")
        return value

    @property
    def home(self) -> Path:
        return Path(self.get(HOME_VARIABLE, ".connector_ops")).expanduser().resolve()

    def path(self, name: str, default_child: str) -> str:
        return str(Path(self.get(name) or self.home / default_child).expanduser().resolve())


HOME_VARIABLE = "CONNECTOR_OPS_HOME"
#: the executor of the Definitions' jobs (:mod:`connector_ops.pipelines.executors`)
EXECUTOR_VARIABLE = "CONNECTOR_OPS_EXECUTOR"
#: seconds a running Celery step may go without a heartbeat (:mod:`connector_ops.pipelines.celery_heartbeat`)
LOST_AFTER_VARIABLE = "CONNECTOR_OPS_CELERY_LOST_AFTER"


#: the settings that name a file or folder. A relative one is read against the working directory of the
#: moment, so each is made absolute once (:func:`pin_paths`); ``CONNECTOR_OPS_DATABASE_URL`` is one too when
#: it names a SQLite file by a relative path.
PATH_VARIABLES = (
    HOME_VARIABLE,
    "CONNECTOR_OPS_FILES_DIR",
    "CONNECTOR_OPS_DRIVE_DIR",
    "CONNECTOR_OPS_OUTBOX_DIR",
    "CONNECTOR_OPS_TEMPLATES_DIR",
    "CONNECTOR_OPS_PIPELINES_DIR",
    "SMTP_CA_FILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
)
DATABASE_URL_VARIABLE = "CONNECTOR_OPS_DATABASE_URL"


def absolute_paths(environ: Mapping[str, str]) -> dict[str, str]:
    """The settings of ``environ`` that are relative paths, made absolute against the working directory now
    (only those; ``~`` is not relative). A relative SQLite URL as the store would make it
    (:func:`connector_ops.resources.virtual_files.urls.absolute_sqlite`)."""
    changed = {}
    for name in PATH_VARIABLES:
        value = environ.get(name)
        if value and not Path(value).expanduser().is_absolute():
            changed[name] = str(Path(value).expanduser().resolve())
    url = environ.get(DATABASE_URL_VARIABLE)
    if url and url.startswith("sqlite"):
        from connector_ops.resources.virtual_files.urls import absolute_sqlite

        if (absolute := absolute_sqlite(url)) != url:
            changed[DATABASE_URL_VARIABLE] = absolute
    return changed


def pin_paths(environ: MutableMapping[str, str] = os.environ) -> Path:
    """Resolve the home (``./.connector_ops`` when unset) and every relative path setting once, here, and
    write the absolute paths back; returns the home. A home that cannot be made or written (the default one in
    an unwritable working directory: a container's ``WORKDIR /``, a systemd unit) is a
    :class:`ConfigurationError` here, where processes start, not a ``PermissionError`` at each step.

    Read again at each call, they would follow the working directory: a notebook's ``%cd`` or an
    ``os.chdir`` would switch to another, empty store, and the code server, the run worker and each step's
    process must agree on one. The code location calls this when it loads, so the processes it starts
    (runs, steps) inherit absolute paths; a Celery worker when it starts; the process's session
    (``invoke()``, ``push_frame``, the magics) before each call, so they are pinned at the first one, and a
    :class:`connector_ops.session.Session` given its own environment when it is made. Hosts that do not
    share a disk each set their own.
    """
    given = environ.get(HOME_VARIABLE)
    environ.update(absolute_paths(environ))
    home = Env(environ).home
    if (problem := unwritable(str(home))) is not None:  # else a PermissionError at every step that writes
        said = f"(set to {given}, resolved to {home})" if given else f"(default ./.connector_ops, resolved to {home})"
        raise ConfigurationError(HOME_VARIABLE, f"{said} {problem}; set {HOME_VARIABLE} to a folder this "
                                 f"user can write")
    if environ.get(HOME_VARIABLE) != str(home):
        environ[HOME_VARIABLE] = str(home)
    return home


def process_environ() -> os._Environ[str]:
    """``os.environ`` with its path settings pinned (:func:`pin_paths`): what the process's sessions read, so
    the first call pins them against the working directory of the moment, and a later ``%cd`` keeps the store."""
    pin_paths(os.environ)
    return os.environ


@dataclass(frozen=True)
class Recipe:
    """How to build one resource: its class and its settings (plain values, or :class:`EnvRef` secrets)."""

    cls: type[Resource]
    settings: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, resource_cls: type[Resource], **settings: Any) -> Recipe:
        return cls(resource_cls, tuple(sorted(settings.items())))

    def replace(self, **changes: Any) -> Recipe:
        return Recipe.of(self.cls, **{**dict(self.settings), **changes})

    def resolved(self, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The settings with every ``EnvRef`` read from ``environ`` (the process environment by default)."""
        env = os.environ if environ is None else environ
        return {k: env.get(v.name) if isinstance(v, EnvRef) else v for k, v in self.settings}

    def build(self, environ: Mapping[str, str] | None = None) -> Resource:
        return self.cls(**self.resolved(environ))


def _platform_files(env: Env) -> Recipe:
    from connector_ops.resources.link_guard import ALLOWED_HOSTS_ENV, AllowList
    from connector_ops.resources.platform_files import (
        DEFAULT_FILE_SERVER_URL,
        PlatformFileStore,
        file_server_url_problem,
    )

    backend = env.choice("CONNECTOR_OPS_FILES_BACKEND", "local", ("local", "database"))
    database = dict(_virtual_files(env).settings)["database_url"] if backend == "database" else None
    url = env.get("CONNECTOR_OPS_FILE_SERVER_URL", DEFAULT_FILE_SERVER_URL)
    problem = file_server_url_problem(url)
    if problem:  # checked here, where the variable's name is known
        raise ConfigurationError("CONNECTOR_OPS_FILE_SERVER_URL", problem)
    allowed = env.get(ALLOWED_HOSTS_ENV, "")
    try:
        AllowList.parse(allowed)
    except ValueError as exc:
        raise ConfigurationError(ALLOWED_HOSTS_ENV, str(exc)) from None
    return Recipe.of(PlatformFileStore, files_dir=env.path("CONNECTOR_OPS_FILES_DIR", "files"),
                     file_server_url=url, allowed_private_hosts=allowed, files_database_url=database,
                     min_free_disk=min_free_disk(env.environ))


def _virtual_files(env: Env) -> Recipe:
    from connector_ops.resources.virtual_files.pool_settings import pool_settings
    from connector_ops.resources.virtual_files.sqlite_names import sqlite_name, utf8_problem
    from connector_ops.resources.virtual_files.store import VirtualFileStore
    from connector_ops.resources.virtual_files.urls import database_url_problem

    url = env.get(DATABASE_URL_VARIABLE)
    problem = database_url_problem(url) if url is not None else None
    if problem:  # checked here, where the variable's name is known; the value itself stays out of the recipe
        raise ConfigurationError(DATABASE_URL_VARIABLE, problem)
    if url is not None and not url.startswith("sqlite"):
        pool_settings(env.environ)  # a bad pool size is named now, not at the first action's connect
    if url is None and (problem := utf8_problem(str(env.home))):  # the default store's file is in the home
        raise ConfigurationError(HOME_VARIABLE, f"{problem} (or set {DATABASE_URL_VARIABLE})")
    default = f"sqlite:///{sqlite_name(str(env.home / 'virtual_files.db'))}"
    return Recipe.of(VirtualFileStore, database_url=env.secret("CONNECTOR_OPS_DATABASE_URL", default),
                     min_free_disk=min_free_disk(env.environ))


def _drive(env: Env) -> Recipe:
    backend = env.choice("CONNECTOR_OPS_DRIVE_BACKEND", "local", ("local", "google"))
    if backend == "local":
        from connector_ops.resources.drive.local import LocalDriveResource

        return Recipe.of(LocalDriveResource, drive_dir=env.path("CONNECTOR_OPS_DRIVE_DIR", "drive"),
                         link_base=env.get("CONNECTOR_OPS_DRIVE_LINK_BASE"), min_free_disk=min_free_disk(env.environ))
    from connector_ops.resources.drive.google import DEFAULT_API_URL, GoogleDriveResource
    from connector_ops.resources.drive.google_auth import DEFAULT_TOKEN_URL

    return Recipe.of(
        GoogleDriveResource,
        api_url=env.get("GOOGLE_DRIVE_API_URL", DEFAULT_API_URL),
        token_url=env.get("GOOGLE_OAUTH_TOKEN_URL", DEFAULT_TOKEN_URL),
        client_id=env.secret("GOOGLE_CLIENT_ID"),
        client_secret=env.secret("GOOGLE_CLIENT_SECRET"),
        refresh_token=env.secret("GOOGLE_REFRESH_TOKEN"),
        service_account_file=env.get("GOOGLE_APPLICATION_CREDENTIALS"),
        subject=env.get("GOOGLE_IMPERSONATE_SUBJECT"),
        use_adc=env.flag("GOOGLE_USE_ADC"),
        scope=env.get("GOOGLE_DRIVE_SCOPE", "drive"),
    )


def _smtp_port(env: Env) -> int | None:
    value = env.get("SMTP_PORT")
    if value is None:
        return None
    if not (value.isascii() and value.isdigit() and 1 <= int(value) <= 65535):
        # the value not repeated: a secret pasted into the wrong variable would be shown
        raise ConfigurationError("SMTP_PORT", "must be a port number (1 to 65535)")
    return int(value)


def _smtp_ca_file(env: Env) -> str | None:
    """``SMTP_CA_FILE``, checked now so a wrong path names the variable instead of failing at the first send."""
    value = env.get("SMTP_CA_FILE")
    if value is not None and not Path(value).expanduser().is_file():
        raise ConfigurationError("SMTP_CA_FILE", f"no such file: {value}")
    return value


def _mail(env: Env) -> Recipe:
    backend = env.choice("CONNECTOR_OPS_MAIL_BACKEND", "outbox", ("outbox", "mailjet", "smtp"))
    if backend == "outbox":
        from connector_ops.resources.mail.outbox import OutboxMailResource

        return Recipe.of(OutboxMailResource, outbox_dir=env.path("CONNECTOR_OPS_OUTBOX_DIR", "outbox"),
                         min_free_disk=min_free_disk(env.environ))
    if backend == "mailjet":
        from connector_ops.resources.mail.mailjet import DEFAULT_API_URL, MailjetResource

        return Recipe.of(
            MailjetResource,
            api_key=env.secret("MAILJET_API_KEY"),
            api_secret=env.secret("MAILJET_API_SECRET"),
            api_url=env.get("MAILJET_API_URL", DEFAULT_API_URL),
            sandbox=env.flag("MAILJET_SANDBOX"),
        )
    from connector_ops.resources.mail.smtp import DEFAULT_PORTS, SmtpMailResource

    return Recipe.of(
        SmtpMailResource,
        host=env.get("SMTP_HOST"),
        port=_smtp_port(env),
        username=env.get("SMTP_USERNAME"),
        password=env.secret("SMTP_PASSWORD"),
        security=env.choice("SMTP_SECURITY", "starttls", DEFAULT_PORTS),
        ca_file=_smtp_ca_file(env),
        templates_dir=env.path("CONNECTOR_OPS_TEMPLATES_DIR", "templates"),
    )


#: resource key -> builder of its recipe. A key missing here is a KeyError, never silently skipped.
BUILDERS: dict[str, Callable[[Env], Recipe]] = {
    "platform_files": _platform_files,
    "virtual_files": _virtual_files,
    "drive": _drive,
    "mail": _mail,
}
assert tuple(BUILDERS) == RESOURCE_KEYS


def recipes_for(keys: Iterable[str] = RESOURCE_KEYS, environ: Mapping[str, str] | None = None) -> dict[str, Recipe]:
    """The recipes of ``keys`` from ``environ``. A bad setting raises ``ConfigurationError`` naming the variable."""
    env = Env(environ)
    return {key: BUILDERS[key](env) for key in keys}


def resources_for(keys: Iterable[str] = RESOURCE_KEYS, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """New resources for ``keys``, built from ``environ`` now; the caller closes them.

    Entry points that make many calls use a :class:`connector_ops.session.Session`, which reuses them.
    """
    env = dict(os.environ if environ is None else environ)
    return {key: recipe.build(env) for key, recipe in recipes_for(keys, env).items()}


def masked_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The connector variables that are set, secrets masked by the one rule of :mod:`connector_ops.kernel.secrets`
    (a secret URL such as the database's keeps everything but its password readable)."""

    def shown(name: str, value: str) -> str:
        if name in SECRET_VARIABLES:
            return mask_secret(value)
        return masked(name, value)

    env = os.environ if environ is None else environ
    prefixes = ("CONNECTOR_OPS_", "GOOGLE_", "MAILJET_", "SMTP_")
    return {k: shown(k, v) for k, v in sorted(env.items()) if k.startswith(prefixes)}
