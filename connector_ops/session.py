"""A session: resources built from the environment on first use, reused across calls, closed at its end.

``invoke()`` without resources, the CLI and the magics run actions in a session, so a run of calls shares
one HTTP client and one OAuth token instead of signing in again per call. A resource is rebuilt when the
environment it was built from changes (its recipe's resolved settings differ), and the old one is closed.

A session is its process's: in a child made by ``fork`` (a multiprocessing pool's worker on Linux) it
builds its resources anew, and the parent's are abandoned there, neither used nor closed
(:mod:`~connector_ops.kernel.forks`); the process session itself is made anew in the child.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, Self

from connector_ops.environment import Recipe, pin_paths, process_environ, recipes_for
from connector_ops.kernel.errors import ActionFailed
from connector_ops.kernel.forks import abandon, in_child
from connector_ops.registry import error_for, get_action, run_action


class Session:
    """Resources from ``environ`` (the process environment by default), as it is at each call: a changed
    setting (a rotated token) is read at the next call, the resource it makes rebuilt.

    Relative path settings (and the default home ``./.connector_ops``) are resolved against the working
    directory once (:func:`connector_ops.environment.pin_paths`): the process's at its first call, a given
    ``environ`` when the session is made — written back into it when it can be written, else kept beside it
    for as long as the caller leaves those settings as they were — so a later ``os.chdir`` or ``%cd`` keeps
    the store."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ
        #: a read-only ``environ``'s path settings as made absolute: setting -> (its value then, absolute)
        self._pinned: dict[str, tuple[str | None, str]] = {}
        if isinstance(environ, MutableMapping):
            pin_paths(environ)
        elif environ is not None:
            pinned = dict(environ)
            pin_paths(pinned)
            self._pinned = {k: (environ.get(k), v) for k, v in pinned.items() if environ.get(k) != v}
        self._built: dict[str, tuple[int, Any]] = {}  # key -> (hash of the resolved recipe, resource)
        self._lock = threading.Lock()
        self._pid = os.getpid()  # the process whose resources _built holds
        #: the process session: what its resources use is kept for the process's life; a user's session's
        #: database engines are released at its close (:meth:`Resource.held`)
        self._for_process = False

    def _own(self) -> None:
        """In a process forked from the one that built the resources: forget them, unclosed (they hold the
        parent's connections and its reserved ids); the next call builds this process's own."""
        if self._pid != os.getpid():
            abandon(*(resource for _, resource in self._built.values()))
            self._built, self._lock, self._pid = {}, threading.Lock(), os.getpid()

    def environ(self) -> dict[str, str]:
        if self._environ is None:
            return dict(process_environ())
        environ = dict(self._environ)
        environ.update({k: absolute for k, (was, absolute) in self._pinned.items() if environ.get(k) == was})
        return environ

    def resources_for(self, keys: Iterable[str]) -> dict[str, Any]:
        """The live resources of ``keys``; a bad setting raises ``InvalidInput`` naming the variable."""
        environ = self.environ()
        recipes = recipes_for(keys, environ)
        self._own()
        with self._lock:
            return {key: self._resource(key, recipe, environ) for key, recipe in recipes.items()}

    def _resource(self, key: str, recipe: Recipe, environ: Mapping[str, str]) -> Any:
        identity = hash((recipe.cls, tuple(sorted(recipe.resolved(environ).items()))))  # no secret kept
        cached = self._built.get(key)
        if cached is not None and cached[0] == identity:
            return cached[1]
        resource = recipe.build(environ)
        resource.held(self._for_process)  # before the old one lets go: an engine both use is kept
        if cached is not None:
            cached[1].close()
        self._built[key] = (identity, resource)
        return resource

    def invoke(self, name: str, payload: Any) -> Any:
        """Run the action ``name`` with this session's resources (only those the action uses)."""
        spec = get_action(name)
        try:  # first: a misconfiguration is the service's fault (500), named clearly, whatever the input
            resources = self.resources_for(spec.resource_keys)
        except Exception as exc:
            raise error_for(spec, ActionFailed(f"configuration error: {exc}")) from exc
        return run_action(spec, payload, resources)

    def close(self) -> None:
        self._own()  # a parent's resources are not this process's to close
        with self._lock:
            built, self._built = self._built, {}
        for _, resource in built.values():
            resource.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_default: Session | None = None
#: held while the process session is made: threads whose first calls race must all get the same one (two
#: would each build their resources, sign in to Google twice and leave one session unused until exit)
_default_lock = threading.Lock()


def default_session() -> Session:
    """The process's session for ``invoke()`` without resources; closed when the interpreter exits."""
    global _default
    session = _default
    if session is not None:
        return session
    with _default_lock:
        if _default is None:
            _default = Session()
            _default._for_process = True
            atexit.register(_default.close)
        return _default


@in_child
def _forget_process_session() -> None:
    """A forked child makes its own process session on its first call (the parent's is abandoned)."""
    global _default, _default_lock
    abandon(_default)
    _default, _default_lock = None, threading.Lock()


def invoke(name: str, payload: Any, resources: Mapping[str, Any] | None = None) -> Any:
    """Run the action ``name`` (``"etl.push"``) on ``payload`` (the spec's JSON input).

    Returns the spec's output (a dict, ``"ok"``, ``None`` …); raises :class:`ConnectorError` with
    ``.status`` and ``.body``.  Without ``resources`` they come from the environment as it is now, through
    the process's session (HTTP clients and tokens reused across calls, closed at exit).
    """
    if resources is None:
        return default_session().invoke(name, payload)
    return run_action(get_action(name), payload, resources)
