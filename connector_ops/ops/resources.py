"""Dagster adapters for the plain resources: one ``ConfigurableResource`` per resource class, vending it.

An adapter has the fields of the resource it builds — same types and descriptions (the attribute
docstrings), which the Dagster UI shows — and hands ops the plain resource, built when a run starts and
closed when it ends (HTTP clients, tokens).

What reaches a run's config is never a value the loading process resolved: secrets are ``dagster.EnvVar``s
naming their variables, and every field left unset (``None``) is filled *where the step runs*, from that
process's environment by the same builders as the CLI (:mod:`connector_ops.environment`). A run launched
from the UI therefore writes to the worker's folders, not to paths of the webserver's home.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import itertools
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, Literal, Optional, get_args, get_origin

import dagster as dg
from pydantic import Field

from connector_ops.environment import EXECUTOR_VARIABLE, RESOURCE_KEYS, Env, EnvRef, Recipe, recipes_for
from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.resource import Resource
from connector_ops.kernel.secrets import RedactedRepr
from connector_ops.resources.drive.google import GoogleDriveResource
from connector_ops.resources.drive.local import LocalDriveResource
from connector_ops.resources.mail.mailjet import MailjetResource
from connector_ops.resources.mail.outbox import OutboxMailResource
from connector_ops.resources.mail.smtp import SmtpMailResource
from connector_ops.resources.platform_files import PlatformFileStore
from connector_ops.resources.virtual_files.store import VirtualFileStore

#: resource class -> the key whose builder makes it from the environment
KEY_OF: dict[type[Resource], str] = {
    PlatformFileStore: "platform_files", VirtualFileStore: "virtual_files",
    LocalDriveResource: "drive", GoogleDriveResource: "drive",
    OutboxMailResource: "mail", MailjetResource: "mail", SmtpMailResource: "mail",
}


#: executors whose steps run on other hosts than the run's (CONNECTOR_OPS_EXECUTOR)
DISTRIBUTED_EXECUTORS = frozenset({"celery"})
SHARED_STORAGE_VARIABLE = "CONNECTOR_OPS_SHARED_STORAGE"


def refuse_single_host(key: str, resource: Resource, environ: Mapping[str, str] | None = None) -> None:
    """Fail a step of a distributed run at once when ``resource`` keeps its state on one host.

    Steps of one run then land on different hosts, and a step would not find what another wrote (a 404 in
    the middle of the run, or a file written where nobody looks). Folders every worker mounts (NFS, a
    shared volume), or workers all on this host, are declared with ``CONNECTOR_OPS_SHARED_STORAGE=true``.
    """
    env = Env(environ)
    executor = (env.get(EXECUTOR_VARIABLE) or "in_process").strip().lower()
    if executor not in DISTRIBUTED_EXECUTORS or env.flag(SHARED_STORAGE_VARIABLE):
        return
    reason = resource.single_host()
    if reason is not None:
        raise InvalidInput(key, f"{reason}. With {EXECUTOR_VARIABLE}={executor} the steps of a run execute on "
                                f"several hosts: configure that, or set {SHARED_STORAGE_VARIABLE}=true if every "
                                "worker mounts the same folders (or all run on this host)")


class ResourceAdapter(RedactedRepr, dg.ConfigurableResource):
    """Base of the adapters: builds :attr:`resource_cls` from the adapter's fields, closes it after the run.

    A field left ``None`` takes the value the environment of the process running the step gives it.
    """

    resource_cls: ClassVar[type[Resource]]

    def create_resource(self, context: dg.InitResourceContext) -> Resource:
        explicit = {name: value for name in self.resource_cls.model_fields
                    if (value := getattr(self, name)) is not None}
        resource = self.resource_cls(**{**self.environment_settings(), **explicit})
        refuse_single_host(KEY_OF[self.resource_cls], resource)
        resource.held(for_process=True)  # built and closed per run or step: its engine kept between them
        return resource

    def environment_settings(self) -> dict[str, Any]:
        """The settings this process's environment gives the resource (none if it picks another backend)."""
        recipe = recipes_for([KEY_OF[self.resource_cls]])[KEY_OF[self.resource_cls]]
        if recipe.cls is not self.resource_cls:
            return {}
        return {name: value for name, value in recipe.resolved().items() if value is not None}

    @contextlib.contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Iterator[Resource]:
        with self.create_resource(context) as resource:
            yield resource


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each annotated attribute of ``cls`` and its bases (PEP 257's attribute
    docstrings), by name."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__ in ("builtins", "pydantic.main", "abc"):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, following in itertools.pairwise(body):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)):
                docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs


def config_type(annotation: Any) -> Any:
    """A type Dagster's config reads: a ``Literal`` becomes the type of its values (the resource checks them)."""
    if get_origin(annotation) is Literal:
        return type(get_args(annotation)[0])
    return annotation


@functools.cache
def adapter_for(cls: type[Resource]) -> type[ResourceAdapter]:
    """The adapter class of ``cls`` (``VirtualFileStore`` -> ``VirtualFileStoreAdapter``), made once."""
    annotations: dict[str, Any] = {}
    namespace: dict[str, Any] = {"__module__": __name__, "__doc__": cls.__doc__, "resource_cls": cls}
    docs = field_docs(cls)
    for name, info in cls.model_fields.items():
        annotations[name] = Optional[config_type(info.annotation)]  # noqa: UP045 - Dagster reads Optional, not X | None
        description = info.description or docs.get(name) or ""
        namespace[name] = Field(default=None, description=f"{description}\n\nUnset: from the environment of "
                                                          "the process running the step.".lstrip())
    namespace["__annotations__"] = annotations
    return type(f"{cls.__name__}Adapter", (ResourceAdapter,), namespace)


def adapt(recipe: Recipe) -> ResourceAdapter:
    """The adapter instance of a recipe: secrets as ``EnvVar``, every other setting left to the environment
    of the process running the step (the recipe's values are this process's, e.g. its home's paths)."""
    settings = {k: dg.EnvVar(v.name) for k, v in recipe.settings if isinstance(v, EnvRef)}
    return adapter_for(recipe.cls)(**settings)


def dagster_resources(environ: Mapping[str, str] | None = None,
                      keys: Iterable[str] = RESOURCE_KEYS) -> dict[str, ResourceAdapter]:
    """The resources of a ``Definitions`` from the environment (``connector_ops.pipelines.defs`` uses this)."""
    return {key: adapt(recipe) for key, recipe in recipes_for(keys, environ).items()}


def is_definitions(value: Any) -> bool:
    return isinstance(value, dg.Definitions)


def build_resources(resources: Mapping[str, Any]) -> contextlib.AbstractContextManager[Any]:
    """Set up the resources of a ``Definitions`` outside a run, as a run would (``%connectors use``)."""
    return dg.build_resources(dict(resources))


# The adapters by name, for Definitions written by hand:
# ``Definitions(resources={"virtual_files": VirtualFileStoreAdapter(database_url=EnvVar("MY_DB"))})``.
PlatformFileStoreAdapter = adapter_for(PlatformFileStore)
VirtualFileStoreAdapter = adapter_for(VirtualFileStore)
LocalDriveResourceAdapter = adapter_for(LocalDriveResource)
GoogleDriveResourceAdapter = adapter_for(GoogleDriveResource)
OutboxMailResourceAdapter = adapter_for(OutboxMailResource)
MailjetResourceAdapter = adapter_for(MailjetResource)
SmtpMailResourceAdapter = adapter_for(SmtpMailResource)
