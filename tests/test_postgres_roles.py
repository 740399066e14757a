"""The store on PostgreSQL under roles other than its tables' owner: what works, and what is refused with a
message naming the table, the role and the privilege (never the driver's text alone)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from connector_ops import ConnectorError, invoke
from connector_ops.resources.virtual_files.engines import dispose_all
from tests.conftest import resources_on


class Roles:
    """A database of its own whose store the superuser made, and the roles to reach it as."""

    def __init__(self, url: str, suffix: str, home: Path) -> None:
        self.url, self.suffix, self.home = url, suffix, home

    def role(self, name: str) -> str:
        return f"{name}_{self.suffix}"

    def resources(self, role: str | None = None) -> dict[str, Any]:
        """Resources connecting as the superuser, acting as ``role`` (``options=-crole=…``)."""
        settings = {"options": f"-crole={self.role(role)}"} if role else {}
        return resources_on(self.url, self.home / (role or "owner"), **settings)

    def sql(self, *statements: str) -> None:
        engine = sa.create_engine(self.url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
        engine.dispose()


@pytest.fixture
def roles(postgres_url: str, tmp_path: Path) -> Iterator[Roles]:
    """``app_…``: every privilege on the store's tables, owner of none; ``ro_…``: ``SELECT`` only."""
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    suffix = uuid.uuid4().hex[:10]
    name = f"roles_{suffix}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
        conn.exec_driver_sql(f"CREATE ROLE app_{suffix}")
        conn.exec_driver_sql(f"CREATE ROLE ro_{suffix}")
    made = Roles(make_url(postgres_url).set(database=name).render_as_string(hide_password=False), suffix, tmp_path)
    try:
        yield made
    finally:
        dispose_all()
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE {name} WITH (FORCE)")
            conn.exec_driver_sql(f"DROP ROLE app_{suffix}")
            conn.exec_driver_sql(f"DROP ROLE ro_{suffix}")
        admin.dispose()


def pushed(roles: Roles, csv: bytes = b"name,city\nAda,Paris\nBob,Oslo\n") -> str:
    """A file the owner pushed, then every privilege on every table given to ``app``, ``SELECT`` to ``ro``."""
    owner = roles.resources()
    pf = owner["platform_files"].add_bytes(csv, "people.csv", "text/csv").to_json()
    vf = invoke("etl.push", {"platformFile": pf}, owner)["virtualFileId"]
    app, ro = roles.role("app"), roles.role("ro")
    roles.sql(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {app}",
              f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {app}",
              f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {ro}")
    return vf


def test_a_read_only_role_is_refused_naming_the_table_role_and_privilege(roles: Roles) -> None:
    vf = pushed(roles)
    ro = roles.resources("ro")
    for action, payload in (("etl.query", {"virtualFileId": vf, "query": {}}),
                            ("etl.iterate", {"content": vf, "maxBatchSize": 10})):
        with pytest.raises(ConnectorError) as info:
            invoke(action, payload, ro)
        message = info.value.message
        assert info.value.status == 500 and not info.value.retryable
        assert "cop_virtual_file" in message and f"'{roles.role('ro')}'" in message, message
        assert "UPDATE" in message and "docs/deployment.md" in message, message


def test_a_role_that_does_not_own_the_tables_queries_by_scanning_and_is_told_who_owns_them(roles: Roles) -> None:
    vf = pushed(roles)
    app = roles.resources("app")
    for _ in range(2):  # the index it may not build: a scan, the second time without trying again
        found = invoke("etl.query", {"virtualFileId": vf, "query": {"city": "Oslo"}}, app)["result"]
        assert found == [{"name": "Bob", "city": "Oslo"}]
    invoke("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"name": "Cy", "city": "Rome"}}]}, app)
    with pytest.raises(ConnectorError) as info:  # a new column: ALTER TABLE, the owner's alone
        invoke("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"zip": "75001"}}]}, app)
    message = info.value.message
    assert info.value.status == 500 and "vf_" in message and "'postgres'" in message, message
    assert "-crole%3Dpostgres" in message and f"'{roles.role('app')}'" in message, message
    with pytest.raises(ConnectorError) as info:
        invoke("etl.clean", {"virtualFileId": vf}, app)
    assert info.value.body is None and "is not the owner" in (info.value.detail or ""), info.value.detail
    assert "'postgres'" in info.value.detail


def test_a_role_refused_insert_on_a_files_table_is_told_so_by_append_rows(roles: Roles) -> None:
    """Append Rows on PostgreSQL streams through a raw ``COPY``, which passes none of SQLAlchemy's hooks: a role
    refused ``INSERT`` on the file's table got the driver's bare "permission denied for table vf_…". It names the
    table, the role and the privilege, as every other refusal does; nothing is appended."""
    vf = pushed(roles)
    app = roles.role("app")
    with sa.create_engine(roles.url).connect() as conn:
        table = conn.exec_driver_sql("SELECT table_name FROM cop_virtual_file WHERE id = %(id)s",
                                     {"id": vf}).scalar_one()
    roles.sql(f"REVOKE INSERT ON {table} FROM {app}")
    with pytest.raises(ConnectorError) as info:
        invoke("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"name": "Cy", "city": "Rome"}}]},
               roles.resources("app"))
    message = info.value.message
    assert info.value.status == 500 and not info.value.retryable
    assert f"permission denied for table {table} to role '{app}': it needs INSERT" in message, message
    assert "docs/deployment.md" in message, message
    assert invoke("etl.query", {"virtualFileId": vf, "query": {}}, roles.resources())["result"] == [
        {"name": "Ada", "city": "Paris"}, {"name": "Bob", "city": "Oslo"}]


def test_no_connection_slot_left_is_a_retryable_503_naming_max_connections(roles: Roles) -> None:
    """SQLSTATE 53300 (here a login role's CONNECTION LIMIT 0; the server's max_connections alike)."""
    name = roles.role("full")
    roles.sql(f"CREATE ROLE {name} LOGIN CONNECTION LIMIT 0")
    try:
        url = make_url(roles.url).set(username=name).render_as_string(hide_password=False)
        with pytest.raises(ConnectorError) as info:
            invoke("etl.query", {"virtualFileId": "x", "query": {}}, resources_on(url, roles.home / "full"))
        assert info.value.status == 503 and info.value.retryable, info.value
        assert "max_connections" in info.value.message and "pool" in info.value.message, info.value.message
    finally:
        dispose_all()
        roles.sql(f"DROP ROLE {name}")


def test_a_schema_the_role_may_not_create_in_is_refused_pointing_to_search_path(roles: Roles) -> None:
    """The catalog's first CREATE TABLE in ``public`` (no CREATE there for the role since PostgreSQL 15) names
    the schema, the role and ``search_path``; with ``-csearch_path`` in the URL's options the store is there."""
    app = roles.role("app")
    csv = b"name\nAda\n"
    denied = roles.resources("app")
    pf = denied["platform_files"].add_bytes(csv, "a.csv", "text/csv").to_json()
    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": pf}, denied)
    message = info.value.message
    assert "schema public" in message and f"'{app}'" in message and "search_path" in message, message
    assert "catalog" in message, message
    schema = f"etl_{roles.suffix}"
    roles.sql(f"CREATE SCHEMA {schema}", f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {app}")
    there = resources_on(roles.url, roles.home / "app", options=f"-crole={app} -csearch_path={schema}")
    vf = invoke("etl.push", {"platformFile": pf}, there)["virtualFileId"]
    assert invoke("etl.query", {"virtualFileId": vf, "query": {"name": "Ada"}}, there)["result"] == [{"name": "Ada"}]
    engine = sa.create_engine(roles.url)
    with engine.connect() as conn:
        tables = conn.exec_driver_sql("SELECT DISTINCT schemaname FROM pg_tables WHERE tablename LIKE 'cop_%%' "
                                      "OR tablename LIKE 'vf_%%'").scalars().all()
    engine.dispose()
    assert tables == [schema]


def test_a_url_that_reaches_no_database_names_the_setting_never_the_password(roles: Roles) -> None:
    """A closed port, a missing database: the driver's words, prefixed with the setting to check."""
    from tests.servers import free_port

    closed = make_url(roles.url).set(host="127.0.0.1", port=free_port(), username="app", password="S3cretPW-x",
                                     query={}).render_as_string(hide_password=False)
    missing = make_url(roles.url).set(database=f"nosuch_{roles.suffix}").render_as_string(hide_password=False)
    for url, said in ((closed, "refused"), (missing, "does not exist")):
        with pytest.raises(ConnectorError) as info:
            invoke("etl.query", {"virtualFileId": "x", "query": {}}, resources_on(url, roles.home / "gone"))
        message = info.value.message
        assert message.startswith("cannot connect to the database of CONNECTOR_OPS_DATABASE_URL"), message
        assert said in message and "S3cretPW" not in message and url not in message, message


def test_a_table_refused_indexing_is_asked_again_once_owned_and_forgotten_once_dropped(
        roles: Roles, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process remembered for good, in a set that only grew, each table its role was refused indexing on:
    once the table was given to that role its Queries still scanned, and a dropped file's entry stayed.
    The refusal is now asked again after ``ASK_AGAIN_SECONDS``, and goes when the table is dropped."""
    from connector_ops.resources.virtual_files import querying

    vf = pushed(roles)
    app = roles.resources("app")
    [(table,)] = _rows(roles, "SELECT table_name FROM cop_virtual_file")
    query = {"virtualFileId": vf, "query": {"city": "Oslo"}}
    assert invoke("etl.query", query, app)["result"] == [{"name": "Bob", "city": "Oslo"}]
    assert _rows(roles, f"SELECT indexname FROM pg_indexes WHERE tablename = '{table}' AND indexname LIKE 'ix%%'") == []
    roles.sql(f"ALTER TABLE {table} OWNER TO {roles.role('app')}",  # ownership fixed (an index needs both)
              f"GRANT CREATE ON SCHEMA public TO {roles.role('app')}")
    monkeypatch.setattr(querying, "ASK_AGAIN_SECONDS", 0.0, raising=False)  # that much time has passed
    assert invoke("etl.query", query, app)["result"] == [{"name": "Bob", "city": "Oslo"}]
    assert _rows(roles, f"SELECT indexname FROM pg_indexes WHERE tablename = '{table}' AND indexname LIKE 'ix%%'")
    other = pushed(roles, b"name,city\nCy,Rome\n")
    [(other_table,)] = _rows(roles, f"SELECT table_name FROM cop_virtual_file WHERE id = '{other}'")
    invoke("etl.query", {"virtualFileId": other, "query": {"city": "Rome"}}, app)  # refused: remembered
    assert other_table in querying._NOT_OURS_TO_INDEX._by_table
    invoke("etl.clean", {"virtualFileId": other}, roles.resources())  # the owner drops it
    assert other_table not in querying._NOT_OURS_TO_INDEX._by_table


def _rows(roles: Roles, sql: str) -> list[tuple]:
    engine = sa.create_engine(roles.url)
    with engine.connect() as conn:
        found = [tuple(row) for row in conn.exec_driver_sql(sql)]
    engine.dispose()
    return found
