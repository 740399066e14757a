"""Step outputs in the virtual-file store's database: the IO manager of our Definitions.

Dagster's default IO manager pickles each output to the local disk of the host that ran the step, so a
step on another host (a Celery worker, a Kubernetes pod) fails with ``FileNotFoundError`` reading its
input. Most outputs are small (ids, ``platformFile`` descriptors, batches of row ranges) and the store's
database is already reached by every host that runs ETL steps, so they are kept there
(:mod:`connector_ops.resources.virtual_files.step_outputs`): with PostgreSQL, any host reads what any
other wrote; with the default SQLite file, the run stays on one host, as it always was.

Values are pickled, as Dagster's own IO managers do (the database is the deployment's own, trusted).
``connector-ops gc`` removes the outputs of runs older than its cutoff.

Not every output is small: a Query's or an Iterate's ``result`` is rows (≈ 110 bytes pickled per row of
seven short columns: 1M rows are 112 MiB, and the run's process holds the rows, the pickle and the
driver's copy at once: 1.4 GiB). A value is one row of one table, so it is bounded by the database
(SQLite refuses a blob over 1,000,000,000 bytes, PostgreSQL's ``bytea`` over 1 GB) — and that refusal
came only after all the step's work, as a raw SQL traceback. So a stored output is capped at
``CONNECTOR_OPS_MAX_STEP_OUTPUT`` (:data:`DEFAULT_MAX_STEP_OUTPUT`), read where the step runs: the
pickle is written into a counting buffer that stops as soon as it passes the limit (never building more
than the limit plus one pickle frame), and the step fails with a 400 naming the step, the output, the
limit and what to wire instead (the virtual file id, or a Pull).

An output is read by the version of connector-ops that runs the next step, which may not be the one that wrote
it (a rolling upgrade: a run, or its re-execution, spread over hosts on two versions). A pickle naming a class
or module the reader lacks failed the step with a bare ``AttributeError`` from ``pickle``. Each stored output
now ends with its writer's build (:func:`build_trailer`), after the pickle — where ``pickle.loads`` of any version
stops reading, so older readers read the value as before — and a pickle that does not load is a 409 naming the
output, both builds and what to do (:func:`unpickled`).
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from connector_ops.environment import recipes_for
from connector_ops.kernel.disk import shown_size, size_setting
from connector_ops.kernel.errors import ConnectorError, InvalidInput, NotFound
from connector_ops.kernel.version import build_version

MAX_STEP_OUTPUT_VARIABLE = "CONNECTOR_OPS_MAX_STEP_OUTPUT"
#: 256 MiB pickled (≈ 2M rows of seven short columns): a quarter of what either database takes in one value,
#: and what a run's process can hold several times over (rows, pickle, driver copy) on an ordinary host.
DEFAULT_MAX_STEP_OUTPUT = 256 << 20
#: the most the setting may be: SQLite's largest blob (its default SQLITE_MAX_LENGTH), below PostgreSQL's 1 GB
DATABASE_VALUE_LIMIT = 1_000_000_000


def max_step_output(environ: Mapping[str, str] | None = None) -> int:
    """The cap ``CONNECTOR_OPS_MAX_STEP_OUTPUT`` sets on one stored step output, in bytes (0: only the
    database's own limit). Read at each output, where the step runs, so a test may lower it."""
    size = size_setting(MAX_STEP_OUTPUT_VARIABLE, DEFAULT_MAX_STEP_OUTPUT, environ)
    if size > DATABASE_VALUE_LIMIT:
        value = (os.environ if environ is None else environ)[MAX_STEP_OUTPUT_VARIABLE]
        raise InvalidInput(MAX_STEP_OUTPUT_VARIABLE, f"at most {DATABASE_VALUE_LIMIT:,} bytes (the largest value "
                                                     f"SQLite stores; PostgreSQL's is 1 GB), got {value!r}")
    return size


class _OverLimit(Exception):
    """The pickle passed its limit; raised from inside ``Pickler.dump`` to stop it."""


class _CappedBuffer(io.BytesIO):
    """A buffer that refuses to grow past ``limit`` bytes: the pickler writes a frame (≤ 64 KiB) at a time,
    so a value far over the limit costs no more than the limit to refuse."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def write(self, data: Any) -> int:
        if self.limit and self.tell() + memoryview(data).nbytes > self.limit:
            raise _OverLimit
        return super().write(data)


def pickled_within(obj: Any, limit: int, trailer: bytes = b"") -> bytes | None:
    """``obj`` pickled, then ``trailer`` (in the same buffer: a stored output is not copied to add it), or
    ``None`` as soon as its pickle passes ``limit`` bytes (0: no limit)."""
    buffer = _CappedBuffer(limit)
    try:
        pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    except _OverLimit:
        return None
    io.BytesIO.write(buffer, trailer)  # past the cap's check: the pickle is what the limit is about
    return buffer.getvalue()


def output_too_large(context: dg.OutputContext, obj: Any, limit: int) -> ConnectorError:
    """The 400 of an output over ``limit``: which step and output, how large, the limit, and what to do."""
    output = context.name if context.mapping_key is None else f"{context.name} [{context.mapping_key}]"
    count = f" ({len(obj):,} items)" if isinstance(obj, list | tuple | dict) else ""
    try:
        action = (context.op_def.tags or {}).get("action")
    except Exception:
        action = None
    return ConnectorError(400, {"message": (
        f"step {context.step_key!r}: its output {output!r}{count} is more than {shown_size(limit)} pickled, the "
        f"most a step output kept between steps may hold ({MAX_STEP_OUTPUT_VARIABLE}); wire the virtual file "
        "instead of its rows (its virtualFileId, which the next step reads itself — a foreach step reads its "
        "rows in batches), or export it with etl.pull to a platform file")}, action=action)


def capped_pickle(context: dg.OutputContext, obj: Any, trailer: bytes = b"") -> bytes:
    """``obj`` pickled (then ``trailer``), within ``CONNECTOR_OPS_MAX_STEP_OUTPUT``; else the step fails with the
    400 of :func:`output_too_large` (a setting that is no size: a 400 naming it)."""
    from connector_ops.ops.factory import failure  # here: the factory's module imports the ops' modules

    try:
        limit = max_step_output()
    except InvalidInput as exc:
        raise failure(ConnectorError(400, {"message": str(exc)})) from None
    data = pickled_within(obj, limit, trailer)
    if data is None:
        raise failure(output_too_large(context, obj, limit))
    return data


#: what follows a stored output's pickle, then its writer's build (``0.1.0+3f2a9c01b7de``)
_BUILD_MARK = b"\x00connector-ops-build:"
#: what a pickle that another version wrote may raise as it loads: a class or module gone or renamed, a class
#: whose state changed shape, bytes this pickle module does not know
_UNREADABLE = (pickle.UnpicklingError, AttributeError, ImportError, EOFError, TypeError, ValueError, IndexError,
               KeyError)
#: a stored output's status when this process cannot read it: written by another version
UNREADABLE_OUTPUT_STATUS = 409


def build_trailer() -> bytes:
    """What follows a stored output's pickle: this process's build (ignored by ``pickle.loads``)."""
    return _BUILD_MARK + build_version().encode()


def writer_build(data: bytes) -> str | None:
    """The build that wrote a stored output, or ``None`` (a version before builds were stored)."""
    at = data.rfind(_BUILD_MARK, max(0, len(data) - 200))
    build = data[at + len(_BUILD_MARK):] if at >= 0 else b""
    return build.decode() if build and build.isascii() and b"\x00" not in build else None


def unpickled(context: dg.InputContext, key: str, data: bytes) -> Any:
    """The value of stored output ``key``; one this process cannot unpickle is a 409 (never retried): written by
    another connector-ops version, it is read only by that version, so the run is made again on one version."""
    from connector_ops.ops.factory import failure  # here: the factory's module imports the ops' modules

    try:
        return pickle.loads(data)  # written by a step to the deployment's database (trusted)
    except _UNREADABLE as exc:
        writer = writer_build(data)
        mine = build_version()
        by = (f"connector-ops {writer}" if writer is not None
              else "a connector-ops version that did not record its build (one before this check)")
        other = "" if writer != mine else " (the same build: the output is damaged, not of another version)"
        raise failure(ConnectorError(UNREADABLE_OUTPUT_STATUS, {"message": (
            f"input {context.name!r}: step output {key!r} cannot be read by this process ({type(exc).__name__}: "
            f"{exc}): it was written by {by}{other}, and this process runs connector-ops {mine}. Every process "
            "of a deployment (code servers, run workers, Celery workers) must run one version: once they do, "
            "re-execute the run from the start (all steps), not from failure — its stored outputs are read "
            "only by the version that wrote them (docs/deployment.md, Upgrading)")})) from None


def output_key(identifier: Sequence[str]) -> str:
    """One output's key: run id, step key, output name (and mapping key of a dynamic output)."""
    return "/".join(identifier)


class StepOutputIOManager(dg.ConfigurableIOManager):
    """Keeps step outputs in the database of the virtual-file store, so every host running steps reads them."""

    database_url: str | None = None
    """SQLAlchemy URL of the database (secret: pass an ``EnvVar``). Unset: the virtual-file store's database
    in the environment of the process running the step (``CONNECTOR_OPS_DATABASE_URL``, else the SQLite file
    under ``CONNECTOR_OPS_HOME``)."""

    _store: Any = PrivateAttr(default=None)

    def _outputs(self) -> Any:
        """The step-output table, resolved once per IO manager (once per run's process)."""
        if self._store is None:
            from connector_ops.resources.virtual_files.step_outputs import StepOutputs

            url = self.database_url or recipes_for(["virtual_files"])["virtual_files"].resolved()["database_url"]
            self._store = StepOutputs(url)
        return self._store

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if context.dagster_type.is_nothing:
            return
        self._outputs().put(output_key(context.get_identifier()), context.run_id,
                            capped_pickle(context, obj, build_trailer()))

    def load_input(self, context: dg.InputContext) -> Any:
        if context.dagster_type.is_nothing:
            return None
        upstream = context.upstream_output
        assert upstream is not None, "an input with no upstream output is loaded by its own input manager"
        key = output_key(upstream.get_identifier())
        try:
            data = self._outputs().get(key)
        except NotFound as exc:
            raise dg.Failure(description=f"input {context.name!r}: {exc}") from None
        return unpickled(context, key, data)


def step_output_io_manager() -> StepOutputIOManager:
    """The IO manager of our Definitions: the database URL as an ``EnvVar`` when it is set, else resolved
    where the step runs (never the loading process's path)."""
    url = os.environ.get("CONNECTOR_OPS_DATABASE_URL")
    return StepOutputIOManager(database_url=dg.EnvVar("CONNECTOR_OPS_DATABASE_URL") if url else None)


class CappedInMemoryIOManager(dg.IOManager):
    """Step outputs in this process's memory, capped as the Definitions' :class:`StepOutputIOManager` caps
    them: the IO manager of ``connector-ops pipeline run`` and ``%pipeline run``. Those runs happen in one
    process, so nothing goes to the store's database (no write per output, nothing for ``gc``; a run in
    process cannot be re-executed from its failure either way), but each output is pickled and checked
    against ``CONNECTOR_OPS_MAX_STEP_OUTPUT``: a pipeline tried locally fails as it would once deployed —
    an output too large, a setting that is no size, a value that cannot be pickled."""

    def __init__(self) -> None:
        self._values: dict[tuple[str, ...], Any] = {}

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if context.dagster_type.is_nothing:
            return
        capped_pickle(context, obj)  # the check only: the value itself is kept, as Dagster's in-memory one does
        self._values[tuple(context.get_identifier())] = obj

    def load_input(self, context: dg.InputContext) -> Any:
        if context.dagster_type.is_nothing:
            return None
        return self._values[tuple(context.get_identifier())]


@dg.io_manager(description="step outputs in memory, capped at CONNECTOR_OPS_MAX_STEP_OUTPUT as in a deployment")
def capped_in_memory_io_manager(_: dg.InitResourceContext) -> CappedInMemoryIOManager:
    """One :class:`CappedInMemoryIOManager` per run (its values go with the run)."""
    return CappedInMemoryIOManager()
