"""A PostgreSQL database whose encoding is not UTF-8 (here LATIN1) stores and returns text exactly.

Push hands the server UTF-8 bytes through ``COPY`` and ``pull_frame`` reads the bytes of ``COPY … TO
STDOUT``; both are right only if the session speaks UTF-8 whatever the database's own encoding, so the
store's connections ask for it (``client_encoding``). The server converts, and refuses what LATIN1 cannot
hold with a clear error instead of storing mojibake."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pandas as pd
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from connector_ops import ConnectorError, invoke, pull_frame, push_frame
from connector_ops.resources.virtual_files.engines import dispose_all
from tests.conftest import resources_on


@pytest.fixture
def latin1_url(postgres_url: str) -> Iterator[str]:
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    name = f"latin1_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' "
                             "TEMPLATE template0")
    try:
        yield make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    finally:
        dispose_all()
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE {name} WITH (FORCE)")
        admin.dispose()


def test_text_round_trips_through_a_latin1_database(latin1_url: str, tmp_path) -> None:
    resources = resources_on(latin1_url, tmp_path / "home")
    csv = "name,city\nRenée,Zürich\nÅsa,\"Malmö, Skåne\"\n".encode()
    pf = resources["platform_files"].add_bytes(csv, "people.csv", "text/csv").to_json()
    vf = invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]
    expected = [{"name": "Renée", "city": "Zürich"}, {"name": "Åsa", "city": "Malmö, Skåne"}]
    assert invoke("etl.iterate", {"content": vf, "maxBatchSize": 10}, resources)["content"] == expected
    assert pull_frame(vf, kind="pyarrow", resources=resources).to_pylist() == expected
    found = invoke("etl.query", {"virtualFileId": vf, "query": {"city": "Zürich"}}, resources)["result"]
    assert found == expected[:1]
    framed = push_frame(pd.DataFrame(expected), resources=resources)  # Arrow's CSV into COPY
    invoke("etl.append_rows", {"rows": [{"virtualFileId": framed, "content": {"name": "Øyvind"}}]}, resources)
    assert pull_frame(framed, kind="pyarrow", resources=resources).to_pylist() == [
        *expected, {"name": "Øyvind", "city": None}]
    ndjson = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in expected).encode()
    pf = resources["platform_files"].add_bytes(ndjson, "people.ndjson", "application/x-ndjson").to_json()
    vf = invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]
    assert invoke("etl.iterate", {"content": vf, "maxBatchSize": 10}, resources)["content"] == expected

    emoji = resources["platform_files"].add_bytes("name\n🙂\n".encode(), "e.csv", "text/csv").to_json()
    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": emoji}, resources)
    assert info.value.status == 400 and "LATIN1" in info.value.message, info.value.summary()
