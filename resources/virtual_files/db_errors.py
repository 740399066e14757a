"""PostgreSQL's refusals, in the words of the deployment that can fix them.

A role without a privilege, a server out of connection slots, a pool with no connection free, a URL that
reaches no database: the driver's text alone ("permission denied for table cop_virtual_file", "sorry, too
many clients already", SQLAlchemy's ``QueuePool limit … timed out``) was a raw 500 that named neither the
role, the privilege, nor the setting to change. :func:`install` translates them where they happen (the
engine's ``handle_error`` hook and its pool), so every caller — actions, ``files serve``, ``gc`` — sees the
same :class:`DatabaseRefused` or :class:`DatabaseBusy`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from connector_ops.kernel.errors import ConnectorOpsError

#: insufficient_privilege: "permission denied for table …", "must be owner of table …"
INSUFFICIENT_PRIVILEGE = "42501"
#: too_many_connections: the server's ``max_connections`` all taken
TOO_MANY_CONNECTIONS = "53300"
#: undefined_table: "relation … does not exist"
UNDEFINED_TABLE = "42P01"
#: out_of_memory, which is also "out of shared memory": the server's lock table full
OUT_OF_MEMORY = "53200"
#: SQLSTATE classes of a URL that reaches no database: connection exception, invalid authorization,
#: invalid catalog name (no such database)
CONNECTION_CLASSES = ("08", "28", "3D")

#: what the server says when it refuses a session for want of a slot (SQLSTATE 53300, which libpq does not
#: hand over for a failed connection): max_connections, a role's or a database's CONNECTION LIMIT
_NO_SLOT = re.compile(r"too many clients already|too many connections for|remaining connection slots are reserved")

#: ``Connection.info`` key: the role (``current_user``) a pooled PostgreSQL session acts as
ROLE = "connector_ops.role"

#: a relation of the store's catalog (cop_*) named in an undefined_table error
_CATALOG_RELATION = re.compile(r'relation "(?:[^"]+\.)?(cop_[a-z_]+)" does not exist')

_OBJECT = re.compile(r'(?:for|of) (table|relation|schema|sequence|index|materialized view) "?([^"\s]+)"?')


class DatabaseRefused(ConnectorOpsError):
    """The database refused the store's role something (a privilege, the ownership of a table): 500, not
    retryable — the same role would be refused again. ``sqlstate`` is the database's."""

    status = 500

    def __init__(self, message: str, sqlstate: str | None) -> None:
        self.sqlstate = sqlstate
        super().__init__(message)


class CatalogMissing(ConnectorOpsError):
    """The store's catalog tables are gone from its database (dropped, or the database re-created under the
    process): 503, retryable — the process forgets its engine, and the next call creates the catalog again."""

    status = 503
    retryable = True


def catalog_missing(table: str) -> CatalogMissing:
    """The error for the catalog table ``table`` found missing: what happened, in the operator's words."""
    return CatalogMissing(
        f"the virtual-file store's catalog table {table} is missing from its PostgreSQL database: was the "
        "database dropped or re-created, or the store's tables (cop_*) dropped, while this process was "
        "running? The virtual files it listed are no longer there; the next call creates the catalog again "
        "(an empty store): try again")


class LockTableFull(ConnectorOpsError):
    """One transaction wanted more locks than the server's shared lock table holds: 500, not retryable — the
    same call takes as many locks again; it must be split, or the server's setting raised."""

    status = 500


def lock_table_full(exc: BaseException) -> LockTableFull | None:
    """SQLSTATE 53200 "out of shared memory" with the server's hint to raise ``max_locks_per_transaction``:
    a call that touches thousands of virtual files in one transaction (Append Rows to each of them) locks
    each file's table and indexes, and the driver's bare "out of shared memory" said neither that nor what
    to do. ``None`` for any other error (an "out of memory" of another kind keeps the server's words)."""
    if sqlstate_of(exc) != OUT_OF_MEMORY:
        return None
    orig = getattr(exc, "orig", None) or exc
    hint = getattr(getattr(orig, "diag", None), "message_hint", None) or ""
    if "max_locks_per_transaction" not in hint and "shared memory" not in first_line(exc):
        return None
    return LockTableFull(
        f"the database server's lock table is full ({first_line(exc)}): one call's transaction locks every "
        "virtual file it touches, and this one touched more than the server holds locks for "
        "(max_locks_per_transaction × max_connections, shared by every session); nothing was changed. Touch "
        "fewer virtual files per call (Append Rows to a few hundred files at a time), or raise the server's "
        "max_locks_per_transaction (it takes a restart) — see docs/deployment.md#database-connections")


class DatabaseBusy(ConnectorOpsError):
    """No database connection to be had now (the process's pool, or the server's slots, all taken): 503,
    retryable — one freed a moment later serves the same call."""

    status = 503
    retryable = True

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        self.sqlstate = sqlstate
        super().__init__(message)


def sqlstate_of(exc: BaseException) -> str | None:
    """The SQLSTATE of ``exc``: a driver error, SQLAlchemy's wrapper of one, or one of ours."""
    state = getattr(exc, "sqlstate", None)
    if state is None:
        state = getattr(getattr(exc, "orig", None), "sqlstate", None)
    return state


def first_line(exc: BaseException) -> str:
    """The driver's own first line, not SQLAlchemy's report with the statement and its parameters."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip()
    return text.splitlines()[0] if text else type(orig).__name__


def _privilege_for(statement: str | None, line: str) -> str:
    """The privilege the refused statement needed, from its verb: ``SELECT … FOR SHARE``/``FOR UPDATE`` lock
    rows, which PostgreSQL grants only with ``UPDATE``."""
    if line.startswith("must be owner"):
        return "ownership"
    verb = (statement or "").lstrip().split(None, 1)[0].upper() if (statement or "").strip() else ""
    if verb == "SELECT" and re.search(r"\bFOR (SHARE|UPDATE|NO KEY UPDATE|KEY SHARE)\b", statement or "", re.I):
        return ("UPDATE: readers lock the file's catalog row FOR SHARE while they read, so that it is not "
                "dropped or replaced under them, and PostgreSQL grants that lock only with UPDATE (a role "
                "with SELECT alone cannot read the store)")
    if verb in ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE"):
        return verb
    if verb in ("CREATE", "ALTER", "DROP") and "schema" in line:
        return "CREATE on the schema"
    if verb == "COPY":
        return "INSERT"
    return "the privilege the statement needs"


def permission_denied(exc: BaseException, *, role: str | None, statement: str | None,
                      owner: str | None = None) -> DatabaseRefused:
    """The refusal ``exc`` (SQLSTATE 42501) naming the object, the role, the privilege it needed and what to
    change: grant it, or connect as the role that owns the store's tables."""
    line = first_line(exc)
    found = _OBJECT.search(line)
    kind, name = found.groups() if found else ("object", "?")
    who = f"role {role!r}" if role else "the role of CONNECTOR_OPS_DATABASE_URL"
    privilege = _privilege_for(statement, line)
    if privilege == "ownership":
        owned_by = f"role {owner!r}" if owner else "another role"
        advice = (f"{kind} {name} is owned by {owned_by}, and only its owner may index, alter or drop it: every "
                  f"process must connect as the role that owns the store's tables (or add "
                  f"?options=-crole%3D{owner or '<owner>'} to CONNECTOR_OPS_DATABASE_URL, the owner granted to "
                  "the login role) — see docs/deployment.md#postgresql-roles-and-privileges")
        return DatabaseRefused(f"{who} is not the owner of {kind} {name}: {advice}", INSUFFICIENT_PRIVILEGE)
    advice = ("grant it, or connect as the role that owns the store's tables — the privileges the store needs "
              "are in docs/deployment.md#postgresql-roles-and-privileges")
    if kind == "schema":
        advice = ("grant CREATE on that schema, or choose a schema the role may create tables in with "
                  "?options=-csearch_path%3D<schema> in CONNECTOR_OPS_DATABASE_URL — see "
                  "docs/deployment.md#postgresql-roles-and-privileges")
    said = "" if line.startswith("permission denied for") else f" ({line})"
    return DatabaseRefused(f"permission denied for {kind} {name} to {who}: it needs {privilege}{said}; {advice}",
                           INSUFFICIENT_PRIVILEGE)


def _owner_of(engine: sa.Engine, line: str) -> str | None:
    """The role owning the table ``line`` names, asked on a connection of its own (the refused transaction is
    aborted); ``None`` when that cannot be had."""
    found = _OBJECT.search(line)
    if not found:
        return None
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT pg_get_userbyid(relowner) FROM pg_class "
                                        "WHERE oid = to_regclass(:name)"), {"name": found.group(2)}).scalar()
    except Exception:  # an owner unknown is only a less precise message
        return None


def _on_error(ctx: sa.engine.ExceptionContext, forget: Callable[[], None] | None = None) -> BaseException | None:
    """The ``handle_error`` hook: the refusals above, translated; anything else left as it is. A catalog
    table missing (SQLSTATE 42P01 on a ``cop_*`` relation) calls ``forget()``, which drops the engine: it
    created the catalog once, when it was built, and a process keeps its engine for its life — so every call
    of a long-lived process failed on it until a restart, while a fresh process worked at once."""
    if ctx.is_pre_ping:
        return None
    exc = ctx.original_exception
    state = sqlstate_of(exc)
    if state == UNDEFINED_TABLE and (missing := _CATALOG_RELATION.search(first_line(exc))):
        if forget is not None:
            forget()
        return catalog_missing(missing.group(1))
    if state == OUT_OF_MEMORY and (full := lock_table_full(exc)) is not None:
        return full
    if state == INSUFFICIENT_PRIVILEGE:
        line = first_line(exc)
        role = ctx.connection.info.get(ROLE) if ctx.connection is not None else None
        owner = _owner_of(ctx.engine, line) if ctx.engine is not None and line.startswith("must be owner") \
            else None
        return permission_denied(exc, role=role, statement=ctx.statement, owner=owner)
    if state == TOO_MANY_CONNECTIONS or (_connecting(ctx) and _NO_SLOT.search(first_line(exc))):
        return no_slot_left(exc, ctx.engine)
    if _connecting(ctx) and (state is None or state[:2] in CONNECTION_CLASSES):
        return unreachable(exc, ctx.engine)
    return None


#: where a store's database URL is set, unless a command took it from an option of its own
DATABASE_URL_SETTING = "CONNECTOR_OPS_DATABASE_URL"


class DatabaseUnreachable(ConnectorOpsError):
    """No session could be opened with ``CONNECTOR_OPS_DATABASE_URL`` (its host, port, user, password,
    database or sslmode): 500, the setting to check named, the URL and its password never shown. ``url``: the
    URL tried, without its password (the error is logged, pickled, stored in run events), so that a command
    whose option gave it can name that option instead (:meth:`named`)."""

    status = 500
    #: the driver's words
    words = ""
    url: sa.URL | None = None

    def named(self, setting: str) -> DatabaseUnreachable:
        """The same failure, naming ``setting`` (``--from-database-url``) as where the URL was given."""
        return _unreachable(self.words, self.url, setting)


def _unreachable(words: str, url: sa.URL | None, setting: str = DATABASE_URL_SETTING) -> DatabaseUnreachable:
    error = DatabaseUnreachable(f"cannot connect to the database of {setting}: {words}; check its host, port, "
                                "user, password, database name and sslmode (and that the server is running)")
    error.words, error.url = words, url  # attributes, not arguments: the error pickles as any other
    return error


def without_password(url: sa.URL) -> sa.URL:
    """``url`` with no password at all (``URL.set(password=None)`` keeps the one it has: None means unchanged)."""
    return url._replace(password=None)


def unreachable(exc: BaseException, engine: sa.Engine | None) -> DatabaseUnreachable:
    """A failed connection (SQLSTATE classes 08, 28, 3D, or libpq's text alone, which is all a failed
    connection gives), naming the setting: the driver's words say what (refused, password authentication
    failed, database "x" does not exist) but not where it was configured."""
    line = first_line(exc)
    password = engine.url.password if engine is not None else None
    if password:
        line = line.replace(str(password), "***")
    return _unreachable(line, without_password(engine.url) if engine is not None else None)


def _connecting(ctx: sa.engine.ExceptionContext) -> bool:
    """Whether ``ctx`` is the failure of a new session (libpq gives no SQLSTATE for those, only its text): an
    ``OperationalError`` outside any statement. Other errors outside a statement are not about the URL's
    settings (psycopg's "can't change 'autocommit' now" on a connection whose state is not what the pool
    thought, e.g. one shared with a forked process), and are not worded as a failure to connect."""
    import psycopg

    return ctx.connection is None and ctx.statement is None \
        and isinstance(ctx.original_exception, psycopg.OperationalError)


def no_slot_left(exc: BaseException, engine: sa.Engine | None) -> DatabaseBusy:
    """The server had no connection slot for a new session (SQLSTATE 53300): a retryable 503 saying what
    shares ``max_connections`` — every process's pool."""
    pool = engine.pool if engine is not None else None
    most = (f"{pool.size()} pooled + {pool._max_overflow} overflow"
            if isinstance(pool, sa.pool.QueuePool) else "its pooled")
    return DatabaseBusy(
        f"the database server has no connection slot left ({first_line(exc)}): every process of the deployment "
        f"keeps up to {most} connections to it (CONNECTOR_OPS_DATABASE_POOL_SIZE, "
        "CONNECTOR_OPS_DATABASE_MAX_OVERFLOW), and together they must stay within the server's "
        "max_connections (less its reserved slots) and any CONNECTION LIMIT of the role or database; try again, "
        "and see docs/deployment.md#database-connections", TOO_MANY_CONNECTIONS)


class StorePool(sa.pool.QueuePool):
    """SQLAlchemy's ``QueuePool`` whose wait for a free connection, timed out, is :class:`DatabaseBusy` (a
    retryable 503 naming the pool and its size) instead of a ``QueuePool limit … timed out`` traceback."""

    def _do_get(self) -> Any:
        try:
            return super()._do_get()
        except sa.exc.TimeoutError:
            raise DatabaseBusy(
                f"no connection of this process's pool to the virtual-file store's database was free within "
                f"{self._timeout:g} s (CONNECTOR_OPS_DATABASE_POOL_TIMEOUT): all {self.size()} pooled + "
                f"{self._max_overflow} overflow connections (CONNECTOR_OPS_DATABASE_POOL_SIZE, "
                "CONNECTOR_OPS_DATABASE_MAX_OVERFLOW) were in use (long or stalled work holds them); try again — "
                "see docs/deployment.md#database-connections") from None


def install(engine: sa.Engine, forget: Callable[[], None] | None = None) -> None:
    """Translate the refusals of ``engine`` (PostgreSQL), and remember each session's role for them;
    ``forget()`` drops the process's engine once the store's catalog is found missing."""
    sa.event.listen(engine, "handle_error", lambda ctx: _on_error(ctx, forget), retval=True)

    @sa.event.listens_for(engine, "connect")
    def remember_role(dbapi_conn: Any, record: Any) -> None:  # once per session, never per query
        with dbapi_conn.cursor() as cur:
            cur.execute("SELECT current_user")
            record.info[ROLE] = cur.fetchone()[0]
        dbapi_conn.commit()
