"""Secrets never show in reprs of resources or in masked settings."""

from __future__ import annotations

import pytest

from connector_ops.kernel.secrets import mask_url, masked
from connector_ops.resources.drive.google import GoogleDriveResource
from connector_ops.resources.virtual_files.store import VirtualFileStore


@pytest.mark.parametrize(
    "url,shown",
    [
        ("postgresql+psycopg://bob:pw@db/x", "postgresql+psycopg://bob:****@db/x"),
        ("postgresql+psycopg://bob@db/x?password=pw&sslmode=require",
         "postgresql+psycopg://bob@db/x?password=****&sslmode=require"),
        ("sqlite:////abs/path/vf.db", "sqlite:////abs/path/vf.db"),
        ("https://api.mailjet.com", "https://api.mailjet.com"),
    ],
)
def test_mask_url(url, shown):
    assert mask_url(url) == shown


def test_masked_settings():
    assert masked("refresh_token", "1//abc") == "****"
    assert masked("client_secret", "s3cr3t") == "****"
    assert masked("database_url", "postgresql://u:pw@h/d") == "postgresql://u:****@h/d"
    assert masked("files_dir", "/tmp/files") == "/tmp/files"


def test_resource_reprs_hide_secrets():
    drive = GoogleDriveResource(client_id="cid", client_secret="CLIENTSECRET", refresh_token="REFRESHTOK")
    store = VirtualFileStore(database_url="postgresql+psycopg://u:DBPASS@h/d?password=DBPASS2")
    for text in (repr(drive), str(drive), repr(store), str(store), f"{store!r} {drive}"):
        for secret in ("CLIENTSECRET", "REFRESHTOK", "DBPASS"):
            assert secret not in text
    assert "client_id='cid'" in repr(drive) and "u:****@h/d" in repr(store)


def test_an_unreachable_database_is_one_clear_line_without_the_password(tmp_path, monkeypatch):
    from connector_ops import ConnectorError, invoke

    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path))
    monkeypatch.setenv("CONNECTOR_OPS_DATABASE_URL", "postgresql+psycopg://bob:S3CRETPW@127.0.0.1:1/db")
    with pytest.raises(ConnectorError) as info:
        invoke("etl.query", {"virtualFileId": "x", "query": {}})
    message = info.value.body["message"]
    assert message.startswith("cannot connect to the database of CONNECTOR_OPS_DATABASE_URL: connection failed")
    assert info.value.status == 500 and "\n" not in message
    assert "S3CRETPW" not in message and "S3CRETPW" not in str(info.value)


def test_an_unreachable_database_s_error_keeps_no_password_in_what_it_carries(tmp_path):
    """The error keeps the URL it tried, for a command to name the option that gave it (``store copy
    --from-database-url``): without the password, which went with it into logs, pickles (a step's failure
    between processes) and Dagster's stored events."""
    import pickle

    from connector_ops.environment import resources_for
    from connector_ops.resources.virtual_files.db_errors import DatabaseUnreachable

    store = resources_for(["virtual_files"], {
        "CONNECTOR_OPS_HOME": str(tmp_path), "CONNECTOR_OPS_DATABASE_URL": "postgresql+psycopg://bob:S3CRETPW@127.0.0.1:1/db",
    })["virtual_files"]
    with pytest.raises(DatabaseUnreachable) as info:
        store.inventory()
    assert info.value.url is not None and info.value.url.host == "127.0.0.1" and info.value.url.username == "bob"
    assert b"S3CRETPW" not in pickle.dumps(info.value)
    assert b"S3CRETPW" not in pickle.dumps(info.value.named("--from-database-url"))


def test_masked_environment_keeps_urls_readable_without_their_passwords():
    from connector_ops.environment import masked_environment

    shown = masked_environment({
        "CONNECTOR_OPS_DATABASE_URL": "postgresql+psycopg://bob:pw@db/x",
        "MAILJET_API_SECRET": "shh",
        "GOOGLE_REFRESH_TOKEN": "1//tok",
        "CONNECTOR_OPS_HOME": "/srv/co",
        "PATH": "/bin",
    })
    assert shown == {
        "CONNECTOR_OPS_DATABASE_URL": "postgresql+psycopg://bob:****@db/x",
        "CONNECTOR_OPS_HOME": "/srv/co",
        "GOOGLE_REFRESH_TOKEN": "****",
        "MAILJET_API_SECRET": "****",
    }


@pytest.mark.parametrize(("data", "name"), [
    (b"a,b\n1,2\nsecret-1,4,5\n", "rows.csv"), (b"a,b\n1,2\r\nsecret-2\n", "rows.csv"),
    (b"a,b\n1,\xffsecret-3\n", "rows.csv"), (b'{"a": "1"}\n' * 200_000 + b'{"a": "secret-4"} x\n', "rows.ndjson")])
def test_a_fast_path_that_gives_up_logs_no_row(resources, caplog, monkeypatch, data, name):
    """What a column-wise load refused is not logged with its content: the server's error quotes the row
    (``CONTEXT: COPY vf_…, line 2: "…"``), and psycopg logs it as a warning when the ``COPY`` ends on an
    error of ours; Arrow's parse errors quote the line. The Push's 400 words the problem itself."""
    from connector_ops import ConnectorError, invoke
    from connector_ops.resources.virtual_files import sqlite_loader

    monkeypatch.setattr(sqlite_loader, "SQLITE_CHILD_MIN_BYTES", 0)  # SQLite's column-wise path too
    caplog.set_level("DEBUG")
    pf = resources["platform_files"].add_bytes(data, name).to_json()
    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": pf}, resources)
    assert info.value.status == 400 and "gave up" in caplog.text
    assert "secret" not in caplog.text and "CONTEXT" not in caplog.text


@pytest.mark.parametrize("url", [
    "postgresql+psycopg://bob:Ab/Cd9@db/x", "postgresql+psycopg://bob:Ab#Cd9@db/x", "postgresql+psycopg://bob:Ab?Cd9@db/x",
])
def test_a_database_password_holding_a_slash_a_hash_or_a_question_mark_is_masked_whole(url):
    """SQLAlchemy reads such a password up to the ``@``; ``urlsplit`` would end the address at the mark."""
    assert mask_url(url) == "postgresql+psycopg://bob:****@db/x"
    store = VirtualFileStore(database_url=url)
    assert "Cd9" not in repr(store) and "bob:****@db/x" in repr(store)


def test_settings_named_private_but_not_secret_are_shown():
    assert masked("allowed_private_hosts", "10.1.2.3, files.internal") == "10.1.2.3, files.internal"
    assert masked("private_key", "-----BEGIN") == "****"


def test_dagster_adapters_given_values_hide_their_secrets():
    from connector_ops.ops.resources import MailjetResourceAdapter, VirtualFileStoreAdapter

    shown = repr(VirtualFileStoreAdapter(database_url="postgresql+psycopg://u:DBPASS@h/db")) + \
        repr(MailjetResourceAdapter(api_key="KEYKEY", api_secret="SECSEC"))
    assert not any(secret in shown for secret in ("DBPASS", "KEYKEY", "SECSEC"))
    assert "u:****@h/db" in shown


@pytest.mark.parametrize(("url", "driver"), [("SQLite:///x.db", "SQLite"),
                                           ("PostgreSQL+psycopg://etl:Hunter2PgPw@pg/etl", "PostgreSQL+psycopg")])
def test_a_driver_written_in_capitals_is_refused_naming_the_variable(tmp_path, url, driver):
    """The check read the driver in any case and let it through; SQLAlchemy then failed at the first query
    with "NoSuchModuleError: Can't load plugin: sqlalchemy.dialects:SQLite", a 500 naming no setting."""
    from connector_ops.environment import resources_for
    from connector_ops.kernel.errors import InvalidInput

    with pytest.raises(InvalidInput) as info:
        resources_for(["virtual_files"], {"CONNECTOR_OPS_HOME": str(tmp_path), "CONNECTOR_OPS_DATABASE_URL": url})
    assert str(info.value) == (
        f"CONNECTOR_OPS_DATABASE_URL: names the database driver {driver!r}, which is written in lower case "
        f"({driver.lower()}); use sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE")


def test_a_refused_database_url_made_by_hand_is_named_by_its_kind_never_repeated(monkeypatch):
    """Given to the store directly (Python, ``%connectors set``, an adapter with an ``EnvVar``), a URL the store
    refuses was quoted whole by pydantic's report, password and all."""
    import dagster as dg
    from pydantic import ValidationError

    from connector_ops.ops.resources import VirtualFileStoreAdapter
    from connector_ops.registry import describe_unexpected

    url = "postgresql+psycopg2://etl:Hunter2PgPw@pg/etl"
    with pytest.raises(ValidationError) as info:
        VirtualFileStore(database_url=url)
    assert "Hunter2PgPw" not in str(info.value)
    assert describe_unexpected(info.value) == (
        "invalid VirtualFileStore: database_url: names the database driver "
        "'postgresql+psycopg2', which is not supported; use sqlite:///PATH or "
        "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE")
    monkeypatch.setenv("MY_DB", url)
    adapter = VirtualFileStoreAdapter(database_url=dg.EnvVar("MY_DB"))
    with pytest.raises(Exception) as built, dg.build_resources({"virtual_files": adapter}) as built_resources:
        built_resources.virtual_files  # noqa: B018
    chain, exc = [], built.value
    while exc is not None:
        chain.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    assert "postgresql+psycopg2" in " ".join(chain) and "Hunter2PgPw" not in " ".join(chain)


def _token_server():
    from starlette.applications import Starlette
    from starlette.responses import RedirectResponse, Response
    from starlette.routing import Route

    async def relative(request):
        return RedirectResponse("/data.csv?token=REDIRTOKEN", status_code=302)

    async def data(request):
        return Response(b"a,b\n1,2\n", media_type="text/csv")

    return Starlette(routes=[Route("/start.csv", relative), Route("/data.csv", data)])


def test_links_reach_httpx_and_httpcore_logs_without_their_query_or_password(tmp_path, monkeypatch, caplog):
    """httpx logs every request at INFO and httpcore each redirect's Location at DEBUG: with a signed link,
    any logging set-up that shows them (Dagster capturing ``httpx``) stored the signature."""
    import logging

    import httpx

    from connector_ops import invoke
    from connector_ops.environment import resources_for
    from tests.servers import serving

    with serving(_token_server()) as base:
        resources = resources_for(environ={"CONNECTOR_OPS_HOME": str(tmp_path),
                                           "CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS": base.removeprefix("http://")})
        link = base.replace("http://", "http://user:LINKPASS@") + "/start.csv?sig=SIGNATURE"
        with caplog.at_level(logging.DEBUG):
            vf = invoke("etl.push", {"platformFile": {"name": "x.csv", "contentType": "text/csv", "link": link}},
                        resources=resources)["virtualFileId"]
            httpx.get(f"{base}/data.csv?mine=VISIBLE")  # another client's records are left as they are
    assert invoke("etl.iterate", {"content": vf, "maxBatchSize": 5}, resources=resources)["content"] == [
        {"a": "1", "b": "2"}]
    logged = caplog.text
    assert f"GET {base}/start.csv?… " in logged and "b'/data.csv?…'" in logged  # the lines are there
    assert not any(secret in logged for secret in ("SIGNATURE", "REDIRTOKEN", "LINKPASS"))
    assert "mine=VISIBLE" in logged


def test_our_file_servers_links_are_shown_without_signature_when_they_fail(tmp_path):
    """A link of our own file server whose file is not on this host is fetched from that server; when it
    fails, the message showed the link raw (its query). A server URL with a password is refused outright
    (``test_platform_files``: ``CONNECTOR_OPS_FILE_SERVER_URL`` must not carry one)."""
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    from connector_ops import ConnectorError, invoke
    from connector_ops.environment import resources_for
    from tests.servers import serving

    async def broken(request):
        return Response(b"", status_code=500)

    with serving(Starlette(routes=[Route("/files/{id}", broken)])) as base:
        resources = resources_for(environ={"CONNECTOR_OPS_HOME": str(tmp_path),
                                           "CONNECTOR_OPS_FILE_SERVER_URL": base})
        link = f"{base}/files/{'a' * 32}?sig=SIGNATURE"
        with pytest.raises(ConnectorError) as info:
            invoke("etl.push", {"platformFile": {"name": "x.csv", "contentType": "text/csv", "link": link}},
                   resources=resources)
    assert info.value.body == {"message": f"fetching {base}/files/{'a' * 32}?… failed with HTTP 500"}


def test_a_link_that_is_no_url_is_a_400_naming_it(tmp_path):
    from connector_ops import ConnectorError, invoke
    from connector_ops.environment import resources_for

    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": {"name": "x.csv", "contentType": "text/csv",
                                             "link": "http://u:pw@[::1/x.csv?token=T"}},
               resources=resources_for(environ={"CONNECTOR_OPS_HOME": str(tmp_path)}))
    assert (info.value.status, info.value.body) == (
        400, {"message": "platformFile.link: is not a URL (Invalid IPv6 URL): 'http://…'"})


def test_a_cli_command_besides_an_action_fails_in_one_line(tmp_path, monkeypatch, capsys):
    from connector_ops.cli import main

    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path))
    monkeypatch.setenv("CONNECTOR_OPS_DATABASE_URL", "postgresql+psycopg://u:SeCrEtPw@127.0.0.1:1/db")
    assert main(["gc", "--dry-run"]) != 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "SeCrEtPw" not in out + err
    assert "failed (500): cannot connect to the database of CONNECTOR_OPS_DATABASE_URL: connection failed" in err


@pytest.mark.parametrize("secret", ["Tr0ub4dor://x", "k3y://Zq9", "pass://word.example", "https://", "sqlite:relative"])
def test_a_secret_holding_a_scheme_like_mark_is_masked_whole(secret):
    """``://`` alone made a secret "a URL", and a URL with no ``user:pw@`` showed whole: a password
    ``Tr0ub4dor://x`` was printed by ``%connectors``, ``masked_environment`` and reprs."""
    from connector_ops.environment import masked_environment

    assert masked("api_secret", secret) == masked("password", secret) == "****"
    assert masked_environment({"SMTP_PASSWORD": secret, "MAILJET_API_SECRET": secret,
                               "CONNECTOR_OPS_DATABASE_URL": secret}) == {
        "CONNECTOR_OPS_DATABASE_URL": "****", "MAILJET_API_SECRET": "****", "SMTP_PASSWORD": "****"}


def test_a_secret_that_is_a_url_with_its_host_keeps_its_host_readable():
    from connector_ops.environment import masked_environment

    assert masked_environment({"CONNECTOR_OPS_DATABASE_URL": "postgresql+psycopg://bob:pa/ss#wd@127.0.0.1/db",
                               "GOOGLE_CLIENT_SECRET": "https://u:pw@vault.example/x"}) == {
        "CONNECTOR_OPS_DATABASE_URL": "postgresql+psycopg://bob:****@127.0.0.1/db",
        "GOOGLE_CLIENT_SECRET": "https://u:****@vault.example/x"}
    assert masked_environment({"CONNECTOR_OPS_DATABASE_URL": "sqlite:////srv/co/vf.db"}) == {
        "CONNECTOR_OPS_DATABASE_URL": "sqlite:////srv/co/vf.db"}


def test_connectors_status_masks_a_session_secret_holding_a_scheme_like_mark(tmp_path, monkeypatch):
    from tests.magic.conftest import make_shell

    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path))
    monkeypatch.setenv("CONNECTOR_OPS_MIN_FREE_DISK", "0")
    ip = make_shell()
    try:
        ip.run_line_magic("connectors", "set CONNECTOR_OPS_MAIL_BACKEND=mailjet MAILJET_API_KEY=pub "
                                        "MAILJET_API_SECRET=k3y://Zq9")
        data, _ = ip.display_formatter.format(ip.run_line_magic("connectors", ""))
        shown = data.get("text/plain", "") + data.get("text/html", "")
        assert "MailjetResource" in shown and "Zq9" not in shown
    finally:
        from connector_ops.magic import unload_ipython_extension

        unload_ipython_extension(ip)
        ip.clear_instance()


def test_connectors_status_masks_every_password_of_a_celery_failover_list(tmp_path, monkeypatch):
    """Celery takes ``;``-separated broker URLs (failover, Redis Sentinel); ``%connectors`` listed the
    variable with the first URL's password hidden and every later one's in clear (a notebook keeps it)."""
    from tests.magic.conftest import make_shell

    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path))
    monkeypatch.setenv("CONNECTOR_OPS_MIN_FREE_DISK", "0")
    monkeypatch.setenv("CONNECTOR_OPS_CELERY_BROKER_URL",
                       "sentinel://:FirstPw@10.0.0.1:26379;sentinel://:Second%40Pw@10.0.0.2:26379")
    monkeypatch.setenv("CONNECTOR_OPS_CELERY_BACKEND_URL", "amqp://etl:FirstPw@mq1//;amqp://etl:Second%40Pw@mq2//")
    ip = make_shell()
    try:
        data, _ = ip.display_formatter.format(ip.run_line_magic("connectors", ""))
    finally:
        from connector_ops.magic import unload_ipython_extension

        unload_ipython_extension(ip)
        ip.clear_instance()
    for shown in (data.get("text/plain", ""), data.get("text/html", "")):
        assert ("CONNECTOR_OPS_CELERY_BROKER_URL=sentinel://:****@10.0.0.1:26379;sentinel://:****@10.0.0.2:26379"
                in shown)
        assert "CONNECTOR_OPS_CELERY_BACKEND_URL=amqp://etl:****@mq1//;amqp://etl:****@mq2//" in shown
        assert "FirstPw" not in shown and "Second" not in shown


@pytest.mark.parametrize("url", ["postgresql+psycopg://bob:p@ss:wo5rd@127.0.0.1/db",
                                 "postgresql+psycopg://bob:secret@127.0.0.1:54x32/db",
                                 "postgresql+psycopg://bob:a:b/c@[::1]:5x/db"])
def test_a_database_url_whose_port_is_no_number_is_a_configuration_error_naming_the_variable(tmp_path, monkeypatch,
                                                                                             url):
    """SQLAlchemy reads the password up to the first ``@`` and calls ``int()`` on what follows the host: an
    unescaped ``@`` ``:`` in a password was a 500 "ValueError: invalid literal for int() … 'wo5rd@127.0.0.1'"."""
    from connector_ops import ConnectorError, invoke

    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path))
    monkeypatch.setenv("CONNECTOR_OPS_DATABASE_URL", url)
    with pytest.raises(ConnectorError) as info:
        invoke("etl.query", {"virtualFileId": "x", "query": {}})
    assert info.value.body == {"message": "configuration error: CONNECTOR_OPS_DATABASE_URL: has a port that is not "
                               "a number (as read after the host); URL-encode @ : / in the password (%40 %3A %2F)"}
    with pytest.raises(ValueError, match="port that is not a number") as built:
        VirtualFileStore(database_url=url)
    assert not any(piece in str(built.value) for piece in ("wo5rd", "54x32", "5x", "secret"))


@pytest.mark.parametrize("url", ["postgresql+psycopg://bob:S3cr3t@HALFTWO@127.0.0.1:1/db",
                                 "postgresql+psycopg://bob:S3cr3t@HALFTWO@127.0.0.1/db"])
def test_a_database_password_with_an_unencoded_at_is_a_configuration_error_never_quoting_its_rest(tmp_path, monkeypatch,
                                                                                                   url):
    """SQLAlchemy ends the password at its first ``@`` and takes the rest for the host: the driver then failed
    to resolve ``HALFTWO@127.0.0.1`` and the 500 (a CLI's stderr, a step's stored failure) quoted half the
    password, with a numeric port that passed the port's check."""
    from connector_ops import ConnectorError, invoke

    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path))
    monkeypatch.setenv("CONNECTOR_OPS_DATABASE_URL", url)
    with pytest.raises(ConnectorError) as info:
        invoke("etl.query", {"virtualFileId": "x", "query": {}})
    assert info.value.body == {"message": "configuration error: CONNECTOR_OPS_DATABASE_URL: has an @ in its host (as "
                               "read after the password, which ends at the first @); URL-encode @ : / in the password "
                               "(%40 %3A %2F)"}
    with pytest.raises(ValueError, match="has an @ in its host") as built:
        VirtualFileStore(database_url=url)
    assert "HALFTWO" not in str(built.value) + str(info.value)


def test_a_database_url_with_a_numeric_or_no_port_passes_the_check():
    from connector_ops.resources.virtual_files.urls import database_url_problem

    for url in ("postgresql+psycopg://bob:p%40ss@127.0.0.1:5432/db", "postgresql+psycopg://bob:pw@db/x",
                "postgresql+psycopg://bob:pw@[::1]:5432/db", "sqlite:////abs/path/vf.db", "sqlite:///rel.db",
                "postgresql+psycopg://bob:Ab/Cd9@db/x", "postgresql+psycopg:///db?host=/run/pg"):
        assert database_url_problem(url) is None, url


def test_a_hidden_value_is_named_wherever_a_message_shows_it() -> None:
    """What a step's error says in place of a value read from the environment (docs/pipelines.md)."""
    from connector_ops.kernel.secrets import named_instead

    name = "the value of ${env.X}"
    assert named_instead("'Sk_Live_9' is not a valid e-mail address", "sk_live_9", name) == (
        "the value of ${env.X} is not a valid e-mail address")  # quoted, any case
    assert named_instead("got token=abcd1234 here", "abcd1234", name) == "got token=the value of ${env.X} here"
    assert named_instead("Input should be less than 10", 1, name) == "the value of ${env.X} should be less than 10"
    assert named_instead("String should have at most 3 characters", "abcd", name) == (
        "the value of ${env.X}: String should have at most 3 characters")
    assert named_instead("'pw-in-list' is wrong", ["pw-in-list"], name) == "the value of ${env.X} is wrong"
