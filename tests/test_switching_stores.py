"""Moving to the multi-host settings docs/deployment.md recommends (CONNECTOR_OPS_FILES_BACKEND=database, a
PostgreSQL CONNECTOR_OPS_DATABASE_URL) leaves the home's old stores where they are: gc says so, and
``connector-ops store copy`` moves their files, streamed, resumable after a failure half-way."""

from __future__ import annotations

import csv
import errno
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from connector_ops import invoke, push_frame
from connector_ops.environment import resources_for
from connector_ops.pipelines.cli import gc as gc_command
from connector_ops.resources.virtual_files.shapes import SCAN_BATCH

DOCS = Path(__file__).resolve().parents[1] / "docs" / "deployment.md"
POSTGRES = pytest.mark.parametrize("own_database_url", ["postgresql"], indirect=True)
SCRIPT = str(Path(sys.executable).parent / "connector-ops")
KEYS = ["platform_files", "virtual_files"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home whose default stores (SQLite file, files folder) hold a virtual file and two platform files."""
    for name in list(os.environ):
        if name.startswith(("CONNECTOR_OPS_", "DAGSTER_HOME")):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    stores = resources_for(["platform_files", "virtual_files"], {"CONNECTOR_OPS_HOME": str(home)})
    pf = stores["platform_files"].add_bytes(b'[{"a": "1", "b": ""}, {"b": "x"}]', "kept.json").to_json()
    stores["platform_files"].add_bytes(b"\x00\xffbytes", "blob.bin", "application/octet-stream")
    invoke("etl.push", {"platformFile": pf}, stores)
    return home


def gc(env: dict[str, str], *args: str) -> tuple[str, str]:
    """gc's output and its notices (stderr without the warning that there is no DAGSTER_HOME)."""
    said = CliRunner().invoke(gc_command, ["--older-than", "0s", *args], env=env)
    assert said.exit_code == 0, said.output
    return said.stdout, "".join(line for line in said.stderr.splitlines(keepends=True) if "DAGSTER_HOME" not in line)


def test_gc_names_a_files_folder_the_settings_left(home):
    """CONNECTOR_OPS_FILES_BACKEND=database: the old platform files are 404s and gc counted 0, silent."""
    env = {"CONNECTOR_OPS_HOME": str(home)}
    assert gc(env, "--dry-run")[1] == ""  # the stores in use: nothing to say
    env["CONNECTOR_OPS_FILES_BACKEND"] = "database"
    folder = sorted(p.name for p in (home / "files").iterdir())
    for args in (["--dry-run"], []):
        out, err = gc(env, *args)
        assert re.fullmatch(
            rf"connector-ops: notice: the home's platform-file folder {re.escape(str(home / 'files'))} \(2 platform "
            r"file\(s\), [\d.]+ (bytes|KiB)\) is not the one the current settings use, so gc neither weighs nor "
            r"touches it; switching stores does not move files: `connector-ops store copy --map FILE` copies them "
            r"into the stores in use \(docs/deployment.md, Switching the stores\), then remove it yourself\n", err), err
        assert "0 platform file(s)" in out
    assert sorted(p.name for p in (home / "files").iterdir()) == folder  # untouched by the real gc
    [unused] = json.loads(gc(env, "--dry-run", "--json")[0])["unusedStores"]
    assert unused["kind"] == "platform-file folder" and unused["path"] == str(home / "files")
    assert unused["files"] == 2 and unused["bytes"] > 0


@POSTGRES
def test_gc_names_a_sqlite_store_the_settings_left(home, own_database_url):
    """CONNECTOR_OPS_DATABASE_URL moved to PostgreSQL: the home's virtual_files.db is named (its files folder,
    still the platform files' store, is not); on a database nothing was stored in yet too."""
    env = {"CONNECTOR_OPS_HOME": str(home), "CONNECTOR_OPS_DATABASE_URL": own_database_url}
    both = gc({**env, "CONNECTOR_OPS_FILES_BACKEND": "database"}, "--dry-run")[1].splitlines()
    assert len(both) == 2 and "virtual-file store" in both[0] and "platform-file folder" in both[1]
    before = (home / "virtual_files.db").stat().st_size
    for args in (["--dry-run"], []):
        _, err = gc(env, *args)
        [line] = err.splitlines()
        assert line.startswith(f"connector-ops: notice: the home's virtual-file store {home / 'virtual_files.db'} (")
        assert "is not the one the current settings use, so gc neither weighs nor touches it" in line
    assert (home / "virtual_files.db").stat().st_size == before



def store_copy(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """``connector-ops store copy ARGS`` through the console script, and its peak resident memory in bytes."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen([SCRIPT, "store", "copy", *args], stdout=out, stderr=err, env=env)
        timer = threading.Timer(300, process.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            timer.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        said = subprocess.CompletedProcess(process.args, process.returncode, out.read().decode(), err.read().decode())
    return said, usage.ru_maxrss * 1024  # Linux: KiB


def big_rows(count: int) -> Any:
    """Batches of ``count`` rows of columns z, a, m (not in name order): a missing ``a`` every 7th row, an
    empty one every 5th, and 1 KiB in ``z``."""
    for start in range(0, count, 5_000):
        yield [(f"{i:08d}" + "x" * 1016, None if i % 7 == 0 else "" if i % 5 == 0 else f"a{i}", f"m{i}")
               for i in range(start, min(count, start + 5_000))]


def moved_env(home: Path, database_url: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CONNECTOR_OPS_", "DAGSTER_HOME"))}
    return {**clean, "CONNECTOR_OPS_HOME": str(home), "CONNECTOR_OPS_DATABASE_URL": database_url,
            "CONNECTOR_OPS_FILES_BACKEND": "database"}


def map_lines(path: Path) -> list[list[str]]:
    with path.open(newline="") as handle:
        return list(csv.reader(handle))


@POSTGRES
def test_store_copy_moves_the_old_files_and_resumes_after_a_failure(home, own_database_url, tmp_path):
    """SQLite and a files folder to PostgreSQL with the files in the database: the destination refuses the
    2nd platform file (a trigger of its own), the copy stops with what it copied mapped; the same command
    again copies only the rest, then nothing. Rows, column order, missing and empty values, names, types and
    bytes arrive as they were; the asset's data is left, said so."""
    env = moved_env(home, own_database_url)
    old = resources_for(KEYS, {"CONNECTOR_OPS_HOME": str(home)})
    big = old["virtual_files"].create_from_batches(["z", "a", "m"], big_rows(SCAN_BATCH * 2 + 123))
    old["virtual_files"].publish("asset:sales", old["virtual_files"].create_from_batches(["k"], [[("v",)]]))
    new = resources_for(KEYS, env)
    assert not new["platform_files"].stored()
    dry, _ = store_copy(env, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would copy virtual file {big} (20,123 rows)" in dry.stdout
    assert re.search(r"^would copy platform file \w+ \(7 bytes\)$", dry.stdout, re.MULTILINE)
    assert dry.stdout.splitlines()[-1] == ("would copy 2 virtual file(s) and 2 platform file(s); 1 asset file(s) not "
                                           "copied")
    assert "connector-ops: notice: asset:sales is an asset's data, not copied: run its job again" in dry.stderr
    assert not new["platform_files"].stored()  # a dry run makes nothing in the destination

    _ = new["platform_files"].inventory()  # the destination's tables, for the trigger
    admin = own_database_url.replace("postgresql+psycopg://", "postgresql://", 1)
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("CREATE FUNCTION one_file() RETURNS trigger AS $$ BEGIN IF (SELECT count(*) FROM "
                     "cop_platform_file) >= 1 THEN RAISE EXCEPTION 'disk full (test)'; END IF; RETURN NEW; END "
                     "$$ LANGUAGE plpgsql")
        conn.execute("CREATE TRIGGER one_file BEFORE INSERT ON cop_platform_file FOR EACH ROW EXECUTE "
                     "FUNCTION one_file()")
    id_map = tmp_path / "ids.csv"
    failed, _ = store_copy(env, "--map", str(id_map))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "disk full (test)" in failed.stderr
    copied = map_lines(id_map)
    assert copied[0] == ["kind", "old_id", "new_id"]
    assert [kind for kind, _, _ in copied[1:]] == ["virtual_file", "virtual_file", "platform_file"]
    for kind, old_id, new_id in copied[1:]:
        assert f"copied {kind.replace('_', ' ')} {old_id} -> {new_id} (" in failed.stdout

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP TRIGGER one_file ON cop_platform_file")
    resumed, _ = store_copy(env, "--map", str(id_map))
    assert resumed.returncode == 0, resumed.stderr
    for _, old_id, new_id in copied[1:]:
        assert f" {old_id} -> {new_id}" in resumed.stdout and f"copied {old_id}" not in resumed.stdout
    assert resumed.stdout.splitlines()[-1] == (
        f"copied 0 virtual file(s) and 1 platform file(s); 3 already copied (named in {id_map}); 1 asset file(s) "
        f"not copied; old -> new ids in {id_map}")
    ids = {old_id: new_id for _, old_id, new_id in map_lines(id_map)[1:]}
    assert len(ids) == len(map_lines(id_map)) - 1 == 4  # each file once
    held = new["virtual_files"].inventory() + new["platform_files"].inventory()
    assert sorted(ids.values()) == sorted(file_id for file_id, _ in held)  # no copy unnamed

    for vf_id, _ in old["virtual_files"].inventory():
        if vf_id.startswith("asset:"):
            continue
        was_names, was = old["virtual_files"].scan_tuples(vf_id)
        now_names, now = new["virtual_files"].scan_tuples(ids[vf_id])
        assert now_names == was_names  # z, a, m: the order kept
        assert [row for batch in now for row in batch] == [row for batch in was for row in batch]  # None, "" kept
    small = next(vf for vf, _ in old["virtual_files"].inventory() if vf not in (big, "asset:sales"))
    assert invoke("etl.query", {"virtualFileId": ids[small], "query": {}}, new)["result"] == [
        {"a": "1", "b": ""}, {"b": "x"}]
    for file_id, _ in old["platform_files"].inventory():
        was, now = old["platform_files"].describe(file_id), new["platform_files"].describe(ids[file_id])
        assert (now.name, now.content_type, now.size) == (was.name, was.content_type, was.size)
        assert new["platform_files"].read_bytes(now) == old["platform_files"].read_bytes(was)

    again, _ = store_copy(env, "--map", str(id_map), "--json")
    assert again.returncode == 0, again.stderr
    assert {f["status"] for f in json.loads(again.stdout)["files"]} == {"already copied", "asset (not copied)"}


@POSTGRES
def test_store_copy_holds_a_batch_not_a_file(tmp_path, own_database_url):
    """A virtual file of 140 MiB is copied in the memory of one of 70 MiB (each read whole, the copy's peak
    grew by the file's size)."""
    peaks = {}
    for rows in (70_000, 140_000):
        home = tmp_path / f"home{rows}"
        old = resources_for(KEYS, {"CONNECTOR_OPS_HOME": str(home)})
        old["virtual_files"].create_from_batches(["z", "a", "m"], big_rows(rows))
        said, peaks[rows] = store_copy(moved_env(home, own_database_url), "--map", str(tmp_path / f"{rows}.csv"))
        assert said.returncode == 0, said.stderr
        assert f"({rows:,} rows)" in said.stdout
    assert peaks[140_000] - peaks[70_000] < 40 << 20, peaks  # 70 MiB more: 0.3 MiB more


def test_store_copy_goes_on_past_a_file_gone_from_the_source(home, tmp_path):
    """A platform file whose bytes left the folder fails alone (exit 1, named); the other files are copied,
    and once it is back the same command copies it only. Into a SQLite store with the files in it."""
    env = moved_env(home, f"sqlite:///{tmp_path / 'new.db'}")
    old = resources_for(KEYS, {"CONNECTOR_OPS_HOME": str(home)})
    names = {file_id: old["platform_files"].describe(file_id).name for file_id, _ in old["platform_files"].inventory()}
    # by name: two files made in one instant have no order of their own
    [first], [second] = ([i for i, n in names.items() if n == name] for name in ("kept.json", "blob.bin"))
    data = home / "files" / second
    data.rename(tmp_path / "aside")
    id_map = tmp_path / "ids.csv"
    failed, _ = store_copy(env, "--map", str(id_map))
    assert failed.returncode == 1
    assert f"connector-ops: error: platform file {second} not copied: " in failed.stderr
    assert "1 failed (stderr says why): run the same command again once that is fixed" in failed.stdout
    assert [old_id for _, old_id, _ in map_lines(id_map)[1:]][1:] == [first]
    (tmp_path / "aside").rename(data)
    resumed, _ = store_copy(env, "--map", str(id_map))
    assert resumed.returncode == 0, resumed.stderr
    assert re.search(rf"^copied platform file {second} -> \w+ \(7 bytes\)$", resumed.stdout, re.MULTILINE)
    assert "copied 0 virtual file(s) and 1 platform file(s); 2 already copied" in resumed.stdout


def test_store_copy_refuses_to_copy_a_store_onto_itself(home, tmp_path):
    """With the settings still naming the home's stores there is nothing to copy: exit 2, said why; the
    virtual files alone moved, the platform files' folder (the same) is named and left."""
    env = {**os.environ, "CONNECTOR_OPS_HOME": str(home)}
    same, _ = store_copy(env, "--map", str(tmp_path / "ids.csv"))
    assert same.returncode == 2
    assert "the stores to copy from are the ones the current settings use, so there is nothing to copy" in same.stderr
    assert not (tmp_path / "ids.csv").exists()
    half, _ = store_copy({**env, "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{tmp_path / 'new.db'}"}, "--dry-run")
    assert half.returncode == 0, half.stderr
    assert ("connector-ops: notice: the platform files are already in the store the settings use: not copied"
            in half.stderr)
    assert half.stdout.splitlines()[-1] == "would copy 1 virtual file(s) and 0 platform file(s)"
    assert store_copy(env, "--from-database-url", "data/x.db", "--dry-run")[0].returncode == 2
    missing, _ = store_copy(env, "--from-database-url", f"sqlite:///{tmp_path / 'no' / 'x.db'}", "--dry-run")
    assert missing.returncode == 3 and f"--from-database-url: the SQLite file {tmp_path / 'no' / 'x.db'} does" in \
        missing.stderr
    assert not (tmp_path / "no").exists()
    assert store_copy({**env, "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{tmp_path / 'new.db'}"})[0].returncode == 2


def test_store_copy_map_outlives_a_cut_line_and_a_copy_removed_since(home, tmp_path):
    """The map's last line cut by a crash is dropped (not misread; the run writes it again from what the
    destination recorded); a copy the map
    names but the destination no longer holds (gc removed it) is made again and mapped anew; a file that is
    no map of this command is refused, not appended to. Progress goes to stderr, file by file."""
    env = {**moved_env(home, f"sqlite:///{tmp_path / 'new.db'}"), "CONNECTOR_OPS_PROGRESS_INTERVAL": "0"}
    id_map = tmp_path / "ids.csv"
    first, _ = store_copy(env, "--map", str(id_map))
    assert first.returncode == 0, first.stderr
    [(vf_id, _)] = resources_for(KEYS, {"CONNECTOR_OPS_HOME": str(home)})["virtual_files"].inventory()
    assert f"connector-ops: copy {vf_id}: 100%" in first.stderr and "connector-ops: copy blob.bin: 100%" in first.stderr
    lines = id_map.read_text()
    id_map.write_text(lines + "platform_file,0123")
    again, _ = store_copy(env, "--map", str(id_map))
    assert again.returncode == 0, again.stderr
    assert "copied 0 virtual file(s) and 0 platform file(s); 3 already copied" in again.stdout
    assert id_map.read_text() == lines
    kind, old_id, new_id = map_lines(id_map)[-1]
    resources_for(KEYS, env)["platform_files"].delete(new_id)
    dry, _ = store_copy(env, "--map", str(id_map), "--dry-run")
    assert f"would copy platform file {old_id} (" in dry.stdout, dry.stdout
    assert dry.stdout.count("\nalready copied ") + dry.stdout.startswith("already copied ") == 2
    remade, _ = store_copy(env, "--map", str(id_map))
    assert remade.returncode == 0, remade.stderr
    [again_id] = re.findall(rf"^copied platform file {old_id} -> (\w+) ", remade.stdout, re.MULTILINE)
    assert map_lines(id_map)[-1] == [kind, old_id, again_id] and again_id != new_id
    (tmp_path / "other.csv").write_text("name,value\n")
    foreign, _ = store_copy(env, "--map", str(tmp_path / "other.csv"))
    assert foreign.returncode == 2 and "is not a map this command wrote" in foreign.stderr
    assert (tmp_path / "other.csv").read_text() == "name,value\n"


@POSTGRES
def test_store_copy_knows_a_store_under_another_spelling_of_its_url(home, own_database_url, tmp_path):
    """The same PostgreSQL database named another way (``postgresql://`` for ``postgresql+psycopg://``, a
    query parameter more), or the same SQLite file by another path, is the store in use: exit 2, nothing
    copied. Compared as text, such a copy doubled the store, and each re-run copied the copies."""
    from sqlalchemy.engine import make_url

    env = moved_env(home, own_database_url)
    push_frame(pa.table({"a": ["1"]}), resources=resources_for(KEYS, env))
    other = make_url(own_database_url).set(drivername="postgresql")
    other = other.update_query_dict({"application_name": "copy"}).render_as_string(hide_password=False)
    refused, _ = store_copy(env, "--from-database-url", other, "--from-files-backend", "database",
                            "--map", str(tmp_path / "ids.csv"))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "the stores to copy from are the ones the current settings use" in refused.stderr
    assert len(resources_for(KEYS, env)["virtual_files"].inventory()) == 1
    sqlite_env = {**os.environ, "CONNECTOR_OPS_HOME": str(home)}
    link = tmp_path / "elsewhere"
    link.symlink_to(home)
    by_link = f"sqlite:///{link / 'virtual_files.db'}"
    assert store_copy(sqlite_env, "--from-database-url", by_link, "--from-files-dir", str(link / "files"),
                      "--dry-run")[0].returncode == 2


@POSTGRES
def test_store_copy_names_the_option_whose_database_it_cannot_reach(home, own_database_url, tmp_path):
    """A --from-database-url that reaches no database (here: no such database on the server) was reported as
    ``cannot connect to the database of CONNECTOR_OPS_DATABASE_URL``, the setting that names the destination,
    which was fine. The error names the option the URL was typed in; an unreachable destination still names
    the setting. Neither shows the password."""
    from sqlalchemy.engine import make_url

    env = moved_env(home, own_database_url)
    wrong = make_url(own_database_url).set(database="no_such_store", password="s3cret-copy")
    wrong = wrong.render_as_string(hide_password=False)
    for args in (["--dry-run"], ["--map", str(tmp_path / "ids.csv")]):
        said, _ = store_copy(env, "--from-database-url", wrong, "--from-files-backend", "database", *args)
        assert said.returncode == 1, said.stdout + said.stderr
        assert said.stderr.startswith("connector-ops: failed (500): cannot connect to the database of "
                                      "--from-database-url: "), said.stderr
        assert '"no_such_store" does not exist' in said.stderr
        assert "CONNECTOR_OPS_DATABASE_URL" not in said.stdout + said.stderr
        assert "s3cret-copy" not in said.stdout + said.stderr
    assert not (tmp_path / "ids.csv").exists()
    unreachable, _ = store_copy({**env, "CONNECTOR_OPS_DATABASE_URL": wrong}, "--dry-run")
    assert unreachable.returncode == 1, unreachable.stdout + unreachable.stderr
    assert "cannot connect to the database of CONNECTOR_OPS_DATABASE_URL: " in unreachable.stderr
    assert "s3cret-copy" not in unreachable.stdout + unreachable.stderr


def estimated_files(database_url: str, home: Path) -> tuple[str, str]:
    """Two files of a PostgreSQL store at ``database_url``: one PostgreSQL estimates at 3,000 rows (analyzed as
    autovacuum does once a file has settled, autovacuum then kept off it) which holds 2,000 since, and one of 2
    rows it has no statistics for yet."""
    from connector_ops.resources.virtual_files import engines

    source = resources_for(KEYS, {"CONNECTOR_OPS_HOME": str(home),
                                  "CONNECTOR_OPS_DATABASE_URL": database_url})["virtual_files"]
    seen = source.create_from_batches(["n"], [[(str(i),) for i in range(3_000)]])
    unseen = source.create_from_batches(["n"], [[("1",), ("2",)]])
    engine = engines.get_engine(database_url)
    with engine.begin() as conn:
        table = conn.execute(sa.text("SELECT table_name FROM cop_virtual_file WHERE id = :id"), {"id": seen}).scalar()
        conn.exec_driver_sql(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")  # the estimate stays put
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"VACUUM ANALYZE {table}")
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DELETE FROM {table} WHERE seq > 2000")  # since: PostgreSQL still says 3,000
    return seen, unseen


@POSTGRES
def test_store_copy_dry_run_takes_postgresql_s_estimate_of_a_file_s_rows(home, own_database_url, tmp_path):
    """A dry run counted each file's rows with ``count(*)``, which reads the whole table: minutes for a dry run
    over large PostgreSQL files. The store keeps no count of its own; PostgreSQL keeps an estimate (autovacuum
    and ANALYZE), which the dry run now shows, said to be one (``about``, ``rowsEstimated``); a file PostgreSQL
    has not looked at yet is counted, and the copy itself reports the rows it copied, exactly."""
    seen, new = estimated_files(own_database_url, tmp_path / "old")

    env = moved_env(home, f"sqlite:///{tmp_path / 'new.db'}")
    args = ["--from-database-url", own_database_url, "--from-files-dir", str(home / "files")]
    dry, _ = store_copy(env, *args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would copy virtual file {seen} (about 3,000 rows)" in dry.stdout
    assert f"would copy virtual file {new} (2 rows)" in dry.stdout
    as_json, _ = store_copy(env, *args, "--dry-run", "--json")
    files = {f["oldId"]: f for f in json.loads(as_json.stdout)["files"]}
    assert (files[seen]["rows"], files[seen]["rowsEstimated"]) == (3_000, True)
    assert files[new]["rows"] == 2 and "rowsEstimated" not in files[new]
    copied, _ = store_copy(env, *args, "--map", str(tmp_path / "ids.csv"))
    assert copied.returncode == 0, copied.stderr
    assert re.search(rf"^copied virtual file {seen} -> \w+ \(2,000 rows\)$", copied.stdout, re.MULTILINE)


def killed_at_its_first_map_line(env: dict[str, str], id_map: Path, copied: Any) -> None:
    """``store copy --map id_map`` killed (SIGKILL, its process group: the SQLite loader too) once its first copy
    is committed and before the map names it. The map is a FIFO: the command reads it as it starts (the test
    writes it the header line), then opens it to append each copy's line once the copy is committed, and that
    open waits for a reader that never comes; so the kill, sent once ``copied()`` (the copies in the
    destination) is 1, falls between a commit and its line, the moment a crash or a power cut may hit. The
    map is then left as such a stop leaves a file: its header alone."""
    os.mkfifo(id_map)
    process = subprocess.Popen([SCRIPT, "store", "copy", "--map", str(id_map), "--no-progress"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        def waiting(what: str, done: Callable[[], bool]) -> None:
            for _ in range(1200):  # a bound, so a command gone wrong fails the test instead of hanging it
                if done():
                    return
                assert process.poll() is None, f"store copy ended before {what}: {process.stderr.read()!r}"
                time.sleep(0.1)
            raise AssertionError(f"store copy did not reach {what}")

        def header_given() -> bool:
            try:
                fd = os.open(id_map, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO until the command opens it to read
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
                return False
            os.write(fd, b"kind,old_id,new_id\n")
            os.close(fd)
            return True

        waiting("reading its map", header_given)
        waiting("its first commit", lambda: copied() == 1)
        assert process.poll() is None  # waiting to write the copy's line
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        process.stderr.close()
    id_map.unlink()
    id_map.write_text("kind,old_id,new_id\n")


def copies_of(store: Any) -> Callable[[], int]:
    """How many files ``store`` holds, asked without making it (0 before the command made it)."""
    return lambda: len(store.inventory()) if store.stored() else 0


@pytest.mark.parametrize(("own_database_url", "rows"), [("sqlite", 2), ("sqlite", 5_000), ("postgresql", 2)],
                         indirect=["own_database_url"])
def test_store_copy_killed_between_a_commit_and_its_map_line_copies_that_file_once(
        own_database_url, rows, tmp_path, monkeypatch):
    """A copy records the file it copies in its own transaction, so a stop between its commit and its line
    in the map (here a SIGKILL) leaves a copy the next run knows: that run copies every other file, writes
    the missing line, and the destination holds each file once. Before, the map was the only record: the
    next run copied the file again and left an unnamed copy for gc. Into SQLite by rows, by the loader
    process (5,000 rows of 1 KiB), and into PostgreSQL by COPY."""
    for name in list(os.environ):
        if name.startswith(("CONNECTOR_OPS_", "DAGSTER_HOME")):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    old = resources_for(KEYS, {"CONNECTOR_OPS_HOME": str(home)})
    first = old["virtual_files"].create_from_batches(["z", "a", "m"], big_rows(rows))
    old["platform_files"].add_bytes(b"bytes", "blob.bin")
    env = moved_env(home, own_database_url)
    new = resources_for(KEYS, env)
    id_map = tmp_path / "ids.csv"
    killed_at_its_first_map_line(env, id_map, copies_of(new["virtual_files"]))
    [(copy, _)] = new["virtual_files"].inventory()

    resumed, _ = store_copy(env, "--map", str(id_map))
    assert resumed.returncode == 0, resumed.stderr
    assert [file_id for file_id, _ in new["virtual_files"].inventory()] == [copy]  # once, not twice
    assert f"already copied virtual file {first} -> {copy}" in resumed.stdout
    assert resumed.stdout.splitlines()[-1].startswith("copied 0 virtual file(s) and 1 platform file(s); 1 already")
    lines = map_lines(id_map)
    assert lines[1] == ["virtual_file", first, copy] and len(lines) == 3  # the line the kill cut, then the rest
    held = new["virtual_files"].inventory() + new["platform_files"].inventory()
    assert sorted(new_id for _, _, new_id in lines[1:]) == sorted(file_id for file_id, _ in held)
    _, was = old["virtual_files"].scan_tuples(first)
    _, now = new["virtual_files"].scan_tuples(copy)
    assert [row for batch in now for row in batch] == [row for batch in was for row in batch]
    elsewhere = tmp_path / "lost.csv"  # the map lost: the destination still knows its copies
    again, _ = store_copy(env, "--map", str(elsewhere))
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1].startswith("copied 0 virtual file(s) and 0 platform file(s); 2 already")
    assert sorted(map_lines(elsewhere)) == sorted(lines)


@pytest.mark.parametrize("backend", ["database", "local"])
def test_store_copy_killed_between_a_platform_file_s_commit_and_its_map_line_copies_it_once(
        home, backend, tmp_path):
    """The same for a platform file, whose descriptor (written last: it makes the file exist) records the file
    it copies: into the database (the home's SQLite file, whose virtual files are the ones in use) and into
    another folder."""
    env = {**moved_env(home, f"sqlite:///{home / 'virtual_files.db'}"), "CONNECTOR_OPS_FILES_BACKEND": backend,
           "CONNECTOR_OPS_FILES_DIR": str(tmp_path / "new files")}
    new = resources_for(KEYS, env)["platform_files"]
    id_map = tmp_path / "ids.csv"
    killed_at_its_first_map_line(env, id_map, copies_of(new))
    [(copy, _)] = new.inventory()

    resumed, _ = store_copy(env, "--map", str(id_map))
    assert resumed.returncode == 0, resumed.stderr
    assert len(new.inventory()) == 2  # each once
    assert re.search(rf"^already copied platform file (\w+) -> {copy}$", resumed.stdout, re.MULTILINE)
    assert resumed.stdout.splitlines()[-1].startswith("copied 0 virtual file(s) and 1 platform file(s); 1 already")
    lines = map_lines(id_map)
    assert len(lines) == 3 and lines[1][2] == copy
    assert sorted(new_id for _, _, new_id in lines[1:]) == sorted(file_id for file_id, _ in new.inventory())
    old = resources_for(KEYS, {"CONNECTOR_OPS_HOME": str(home)})["platform_files"]
    for _, old_id, new_id in lines[1:]:
        assert new.read_bytes(new.describe(new_id)) == old.read_bytes(old.describe(old_id))
        assert "copiedFrom" not in new.describe(new_id).to_json()  # kept in the store, never served


def test_store_copy_resumes_from_the_map_of_a_version_that_recorded_nothing(home, tmp_path):
    """A copy an earlier version made records nothing in the destination, only its line in the map: a copy
    the map names and the destination holds is still not copied again."""
    env = moved_env(home, f"sqlite:///{tmp_path / 'new.db'}")
    old = resources_for(KEYS, {"CONNECTOR_OPS_HOME": str(home)})["virtual_files"]
    new = resources_for(KEYS, env)["virtual_files"]
    [(vf_id, _)] = old.inventory()
    columns, batches = old.scan_tuples(vf_id)
    earlier = new.create_from_batches(columns, batches)  # as that version copied it: no origin recorded
    assert new.copies() == {}
    id_map = tmp_path / "ids.csv"
    id_map.write_text(f"kind,old_id,new_id\nvirtual_file,{vf_id},{earlier}\n")
    resumed, _ = store_copy(env, "--map", str(id_map))
    assert resumed.returncode == 0, resumed.stderr
    assert f"already copied virtual file {vf_id} -> {earlier}" in resumed.stdout
    assert [file_id for file_id, _ in new.inventory()] == [earlier]
    assert len(map_lines(id_map)) == 4  # its line, then the two platform files'


def test_store_copy_writes_the_map_lines_a_stop_cut_together(tmp_path, monkeypatch):
    """A re-run writes again the lines a stop cut from the map (copies the destination recorded, which the map
    does not name): one ``fsync`` of the map for them all, not one each (nothing is copied between them); the
    lines as before, after those the map has. The real ``fsync`` runs, counted when it is the map's."""
    from connector_ops.store_copy import MAP_HEADER, PLATFORM, VIRTUAL, IdMap, Item, copy_all

    path = tmp_path / "ids.csv"
    id_map = IdMap(path)
    id_map.record(VIRTUAL, "named", "n1")
    items = [Item(VIRTUAL, "named", status="already copied", new_id="n1"),
             Item(VIRTUAL, "cut", status="already copied", new_id="c1"),
             Item(PLATFORM, "cut too", status="already copied", new_id="c2"),
             Item(VIRTUAL, "asset:x", status="asset (not copied)")]
    synced, real = [], os.fsync

    def counted(fd: int) -> None:
        if os.path.samestat(os.fstat(fd), path.stat()):
            synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    copy_all({}, {}, items, id_map, lambda item: None)
    assert len(synced) == 1
    assert map_lines(path) == [MAP_HEADER, ["virtual_file", "named", "n1"], ["virtual_file", "cut", "c1"],
                               ["platform_file", "cut too", "c2"]]
    assert IdMap(path).ids == id_map.ids == {(VIRTUAL, "named"): "n1", (VIRTUAL, "cut"): "c1",
                                             (PLATFORM, "cut too"): "c2"}


@POSTGRES
def test_store_copy_counts_no_postgresql_file_and_says_the_rows_it_copied(home, own_database_url, tmp_path):
    """``store copy`` counted every file with ``count(*)`` before copying it (a read of the whole table, for the
    progress bar's total and the output's line), then read it again to copy it. Every statement the command
    sends through SQLAlchemy is watched (a listener on every engine, the command run in this process): on a
    PostgreSQL source none counts a file's rows; the bar goes by PostgreSQL's estimate where it has one
    (here 3,000, of a file that holds 2,000 since), and the line and ``--json`` give the rows copied, counted
    as they were written: exact, on PostgreSQL as on SQLite (whose count, which decodes no row, stays)."""
    from connector_ops.store_cli import store

    seen, unseen = estimated_files(own_database_url, tmp_path / "old")

    statements: list[str] = []

    def sent(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    env = {**moved_env(home, f"sqlite:///{tmp_path / 'new.db'}"), "CONNECTOR_OPS_PROGRESS_INTERVAL": "0"}
    args = ["copy", "--from-database-url", own_database_url, "--from-files-dir", str(home / "files")]
    sa.event.listen(sa.engine.Engine, "before_cursor_execute", sent)
    try:
        said = CliRunner().invoke(store, [*args, "--map", str(tmp_path / "ids.csv"), "--json"], env=env)
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", sent)
    assert said.exit_code == 0, said.output
    assert [s for s in statements if re.search(r"count\(", s, re.IGNORECASE)] == []
    assert any("pg_class" in statement for statement in statements)  # the estimate asked, by a watched engine
    files = {f["oldId"]: f for f in json.loads(said.stdout)["files"] if f["kind"] == "virtual_file"}
    assert (files[seen]["rows"], files[unseen]["rows"]) == (2_000, 2)
    assert not any("rowsEstimated" in f for f in files.values())
    assert f"connector-ops: copy {seen}: 66% (2k rows of 3k rows)" in said.stderr  # against the estimate
    assert f"connector-ops: copy {unseen}: 2 rows" in said.stderr  # no statistics yet: no total

    sqlite_home = tmp_path / "sqlite home"
    old = resources_for(KEYS, {"CONNECTOR_OPS_HOME": str(sqlite_home)})["virtual_files"]
    wide = old.create_from_batches(["z", "a", "m"], big_rows(SCAN_BATCH + 7))
    copied, _ = store_copy(moved_env(sqlite_home, own_database_url), "--map", str(tmp_path / "sqlite.csv"), "--json")
    assert copied.returncode == 0, copied.stderr
    [item] = [f for f in json.loads(copied.stdout)["files"] if f["kind"] == "virtual_file"]
    assert (item["oldId"], item["rows"], "rowsEstimated" in item) == (wide, SCAN_BATCH + 7, False)


def test_a_copy_s_record_of_its_origin_goes_with_it(database_url):
    """The record of what a copy copies (``cop_vf_origin``) is removed with the file, in its transaction, on both
    databases; it holds no foreign key (creating one locked the catalog against every write on an upgrade)."""
    from connector_ops.resources.virtual_files import catalog, engines
    from connector_ops.resources.virtual_files.store import VirtualFileStore

    store = VirtualFileStore(database_url=database_url)
    vf = store.create_from_batches(["a"], [[("1",)]], copied_from="a-file-elsewhere")
    assert store.copies()["a-file-elsewhere"] == vf
    store.drop(vf)
    assert "a-file-elsewhere" not in store.copies()
    with engines.get_engine(database_url).connect() as conn:
        left = conn.execute(sa.select(sa.func.count()).select_from(catalog.vf_origin)
                            .where(catalog.vf_origin.c.vf_id == vf)).scalar()
    assert left == 0
