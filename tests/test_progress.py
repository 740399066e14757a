"""Long work reports progress through whatever reporter the entry point installed."""

from __future__ import annotations

import time

import pytest

from connector_ops import invoke
from connector_ops.kernel.progress import reporting_to
from tests.servers import another_file_server


class Recorder:
    def __init__(self) -> None:
        self.reports: list[tuple[str, int | None, int, bool]] = []

    def factory(self, description: str, total: int | None, unit: str) -> Recorder.Bar:
        return Recorder.Bar(self, description, total)

    class Bar:
        def __init__(self, recorder: Recorder, description: str, total: int | None) -> None:
            self.recorder, self.description, self.total, self.done = recorder, description, total, 0

        def update(self, n: int) -> None:
            self.done += n

        def close(self) -> None:
            self.recorder.reports.append((self.description, self.total, self.done, True))


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_push_pull_upload_and_download_report_their_progress(files, env):
    data = b"a,b\n" + b"1,2\n" * 50_000
    pf = files.add_bytes(data, "big.csv").to_json()
    recorder = Recorder()
    with reporting_to(recorder.factory):
        vf = invoke("etl.push", {"platformFile": pf})["virtualFileId"]
        pulled = invoke("etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": "o.csv"})["platformFile"]
        file_id = invoke("drive.upload_file", {"platformFile": pf})["fileId"]
        downloaded = invoke("drive.download_file", {"fileId": file_id})["platformFile"]
    by_name = {d: (total, done) for d, total, done, _ in recorder.reports}
    assert by_name["push big.csv"] == (len(data), len(data))
    assert by_name["pull o.csv"] == (50_000, 50_000) and pulled["size"]  # by rows, to a known end
    assert by_name["download big.csv"] == (downloaded["size"], downloaded["size"])
    assert all(closed for *_, closed in recorder.reports)  # every bar is closed (disappears) when done


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_ndjson_read_again_says_so_and_reports_every_pass(files, env, monkeypatch):
    """A late number or a late key makes the columnar path read the file again (and, for a key, list every
    key first): each pass is a bar of its own that says why, and each reads the whole file."""
    from connector_ops.etl import ndjson_fast
    from connector_ops.resources.virtual_files import ndjson_columns, sqlite_loader

    monkeypatch.setattr(sqlite_loader, "SQLITE_CHILD_MIN_BYTES", 0)
    monkeypatch.setattr(ndjson_fast, "BLOCK", 4096)
    monkeypatch.setattr(ndjson_columns, "BLOCK", 4096)
    rows = b'{"a": "x"}\n' * 2_000
    cases = {"n.ndjson": (rows + b'{"a": 7}\n', ["push n.ndjson",
                                                 "push n.ndjson (again: a value not text, seen late)"]),
             "k.ndjson": (rows + b'{"a": "y", "b": "z"}\n', ["push k.ndjson", "push k.ndjson (listing keys)",
                                                             "push k.ndjson (again: a key seen late)"])}
    for name, (data, bars) in cases.items():
        recorder = Recorder()
        with reporting_to(recorder.factory):
            invoke("etl.push", {"platformFile": files.add_bytes(data, name).to_json()})
        assert [d for d, *_ in recorder.reports] == bars
        assert all(total == len(data) for _, total, _, _ in recorder.reports)
        assert recorder.reports[-1][2] == len(data) and all(closed for *_, closed in recorder.reports)


def test_a_link_without_a_size_reports_the_servers_content_length(files, env, tmp_path, monkeypatch):
    """A descriptor written by hand (name and link, no size) still gets a progress bar with its end: the size
    is the server's ``Content-Length`` (which also lets SQLite's columnar path start its loader process, worth
    it only for a known size of 4 MiB or more)."""
    data = b"".join(b'{"a": "%d", "b": "%s"}\n' % (i, b"x" * 40) for i in range(100_000))
    with another_file_server(tmp_path / "remote", monkeypatch) as remote:
        pf = remote.add_bytes(data, "a.ndjson")
        recorder = Recorder()
        with reporting_to(recorder.factory):
            vf = invoke("etl.push", {"platformFile": {"name": pf.name, "link": pf.link,
                                                      "contentType": pf.content_type}})["virtualFileId"]
    assert recorder.reports == [("push a.ndjson", len(data), len(data), True)]
    assert invoke("etl.iterate", {"content": vf, "maxBatchSize": 1})["content"] == [{"a": "0", "b": "x" * 40}]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_frames_pushed_and_pulled_report_their_rows(env):
    """``%etl push --df`` / ``pull --df`` (and push_frame / pull_frame) show a bar by rows, as Push and Pull do."""
    import pandas as pd

    from connector_ops import pull_frame, push_frame

    frame = pd.DataFrame({"n": range(70_000)})  # two slices
    recorder = Recorder()
    with reporting_to(recorder.factory):
        assert len(pull_frame(push_frame(frame))) == 70_000
    assert recorder.reports == [("push DataFrame", 70_000, 70_000, True), ("pull DataFrame", None, 70_000, True)]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_query_reports_the_rows_it_has_read(files, env):
    """A Query of every row of a big file reads for seconds and showed nothing (Push and Pull show a bar):
    it reports its rows a page at a time."""
    data = b"a,b\n" + b"".join(b"%d,x\n" % i for i in range(30_000))
    vf = invoke("etl.push", {"platformFile": files.add_bytes(data, "q.csv").to_json()})["virtualFileId"]
    recorder = Recorder()
    with reporting_to(recorder.factory):
        result = invoke("etl.query", {"virtualFileId": vf, "query": {}})["result"]
        one = invoke("etl.query", {"virtualFileId": vf, "query": {"a": "7"}})["result"]
    assert len(result) == 30_000 and one == [{"a": "7", "b": "x"}]
    assert recorder.reports == [(f"query {vf}", None, 30_000, True), (f"query {vf}: indexing a", None, 0, True),
                                (f"query {vf}", None, 1, True)]  # the first query on a: its index, a phase


def _log_lines(lines: list[str]):
    """A factory of Dagster's reporter (what every op installs) writing every update to ``lines``."""
    from connector_ops.kernel.progress import LogReporter

    return lambda d, t, u: LogReporter(lines.append, d, t, u, interval=0.0)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_failed_push_says_so_and_its_second_read_has_a_label_of_its_own(files, env, monkeypatch):
    """A Push of a CSV with a ragged last line (an NDJSON file with a broken one): the columnar pass reads it
    all and gives up, the row reader reads it again to word the error. Dagster's lines said
    ``push bad.csv: 100% (…) in 3.8s`` (a success) and the second read restarted under the same name; now
    each pass says how it ended, and the second says why it reads again."""
    from connector_ops.etl import ndjson_fast
    from connector_ops.resources.virtual_files import ndjson_columns, sqlite_loader

    monkeypatch.setattr(sqlite_loader, "SQLITE_CHILD_MIN_BYTES", 0)
    monkeypatch.setattr(sqlite_loader, "SQLITE_WARM_MIN_BYTES", 0)
    monkeypatch.setattr(ndjson_fast, "BLOCK", 4096)  # the bad line past the first block, which is probed
    monkeypatch.setattr(ndjson_columns, "BLOCK", 4096)
    bad = {"bad.csv": (b"a,b\n" + b"1,2\n" * 20_000 + b"1,2,3\n", "line 20002"),
           "bad.ndjson": (b'{"a": "1"}\n' * 20_000 + b'{"a": \n', "line 20001")}
    for name, (data, where) in bad.items():
        lines: list[str] = []
        with reporting_to(_log_lines(lines)), pytest.raises(Exception, match=where):
            invoke("etl.push", {"platformFile": files.add_bytes(data, name).to_json()})
        ends = [line for line in lines if " in " in line or " failed " in line or " stopped " in line
                or " gave up " in line]
        assert ends[0].startswith(f"push {name}: gave up at "), lines  # not "failed": another pass follows
        assert ends[-1].startswith(f"push {name} (again, row by row) failed at "), lines
        assert not any(line.endswith("s") and " in " in line for line in ends), lines  # none reads as finished


def test_a_stopped_piece_of_work_says_stopped_and_a_finished_one_its_time():
    from connector_ops.kernel.progress import track

    lines: list[str] = []
    with reporting_to(_log_lines(lines)):
        with pytest.raises(KeyboardInterrupt), track("pull o.csv", 200, "B") as reporter:
            reporter.update(90)
            raise KeyboardInterrupt
        with track("pull p.csv", 200, "B") as reporter:
            reporter.update(200)
    assert [line.split(" after ")[0] for line in lines if " after " in line] == ["pull o.csv stopped at 45%"]
    assert lines[-1].startswith("pull p.csv: 100% (200 B of 200 B) in ")


def test_a_reporter_without_an_outcome_is_still_closed():
    """tqdm's bars and reporters written before outcomes existed take ``close()`` with no argument."""
    recorder = Recorder()
    with reporting_to(recorder.factory), pytest.raises(ValueError):
        from connector_ops.kernel.progress import track

        with track("x", 1, "B"):
            raise ValueError
    assert recorder.reports == [("x", 1, 0, True)]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_map_and_every_pull_report_rows_against_the_files_row_count(files, env):
    """Map and Pull reported ``None`` as their total (no percentage, no ETA) though the store knows the row
    count."""
    data = b"a,b\n" + b"".join(b"%d, x \n" % i for i in range(25_000))
    vf = invoke("etl.push", {"platformFile": files.add_bytes(data, "m.csv").to_json()})["virtualFileId"]
    recorder = Recorder()
    with reporting_to(recorder.factory):
        invoke("etl.map", {"virtualFileId": vf, "action": "trim"})
        for kind in ("csv", "json", "parquet"):
            invoke("etl.pull", {"virtualFileId": vf, "exportType": kind, "exportName": f"o.{kind}"})
    assert recorder.reports == [("map trim", 25_000, 25_000, True), ("pull o.csv", 25_000, 25_000, True),
                                ("pull o.json", 25_000, 25_000, True), ("pull o.parquet", 25_000, 25_000, True)]


def test_rows_are_counted_for_a_bar_only(files, env):
    """Map and Pull counted their file's rows (a scan of the table on PostgreSQL) for a bar's end even where no
    bar was shown: every Dagster-less library call and every benchmark paid it. Counted only when shown."""
    import sqlalchemy as sa

    from connector_ops.environment import resources_for

    data = b"a\n" + b"".join(b"%d\n" % i for i in range(100))
    vf = invoke("etl.push", {"platformFile": files.add_bytes(data, "c.csv").to_json()})["virtualFileId"]
    engine = resources_for(["virtual_files"], environ=env)["virtual_files"].sql.engine
    counts: list[str] = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        if "count(" in statement.lower():
            counts.append(statement)

    sa.event.listen(engine, "before_cursor_execute", seen)
    try:
        invoke("etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": "o.csv"})
        invoke("etl.map", {"virtualFileId": vf, "action": "trim"})
        assert counts == []
        with reporting_to(Recorder().factory):
            invoke("etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": "o.csv"})
        assert len(counts) == 1
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)


def test_amounts_are_rounded_before_their_unit_is_chosen():
    from connector_ops.kernel.progress import amount

    assert [amount(n, "rows") for n in (999, 1000, 999_950, 999_999_999, 1_234_567)] == [
        "999 rows", "1k rows", "1M rows", "1G rows", "1.23M rows"]
    assert [amount(n, "B") for n in (1023, 1024, 1_048_556, 83_206_897)] == ["1023 B", "1.0 KiB", "1.0 MiB", "79.4 MiB"]


def test_log_lines_give_amounts_as_people_read_them():
    """Dagster's lines said ``67,355,566 B``; they say ``64.2 MiB``, ``390k rows``, with a percentage where
    the end is known."""
    from connector_ops.kernel.progress import track

    lines: list[str] = []
    with reporting_to(_log_lines(lines)):
        with track("push big.csv", 83_206_897, "B") as reporter:
            reporter.update(67_355_566)
        with track("map trim", None, "rows") as reporter:
            reporter.update(390_123)
        with track("pull o.csv", 1_000_000, "rows") as reporter:
            reporter.update(512)
    assert lines[0] == "push big.csv: 80% (64.2 MiB of 79.4 MiB)"
    assert lines[2] == "map trim: 390k rows"
    assert lines[4] == "pull o.csv: 0% (512 rows of 1M rows)"


class Ticks:
    """Records each bar opened (description, total, unit) and how many updates it had, counting ``update(0)``:
    the ticks of one long SQL statement."""

    def __init__(self) -> None:
        self.bars: list[list] = []

    def factory(self, description: str, total: int | None, unit: str) -> Ticks.Bar:
        self.bars.append([description, total, unit, 0, 0])
        return Ticks.Bar(self.bars[-1])

    class Bar:
        def __init__(self, entry: list) -> None:
            self.entry = entry

        def update(self, n: int) -> None:
            self.entry[3] += n
            self.entry[4] += 1

        def close(self) -> None:
            pass


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_iterate_join_validate_delete_and_an_index_build_show_progress(files, env):
    """Iterate of a big batch, Join, Validate, Delete Rows and a first Query's index build ran for seconds
    showing nothing. Iterate counts its rows a page at a time to the batch's size; the others, single SQL
    statements, are phases that SQLite's progress handler keeps alive."""
    data = b"id,cat\n" + b"".join(b"%d,c%d\n" % (i, i % 7) for i in range(60_000))
    vf = invoke("etl.push", {"platformFile": files.add_bytes(data, "t.csv").to_json()})["virtualFileId"]
    ticks = Ticks()
    with reporting_to(ticks.factory):
        batch = invoke("etl.iterate", {"content": vf, "maxBatchSize": 45_000})
        invoke("etl.join", {"join": {"left": {"virtualFileId": vf, "customId": "a", "key": "id"},
                                     "right": {"virtualFileId": vf, "customId": "b", "key": "id"}, "type": "INNER"}})
        invoke("etl.validate", {"content": vf, "schema": {"id": {"type": "integer", "required": True}}})
        invoke("etl.delete_rows", {"virtualFileId": vf, "request": {"cat": "c3"}, "dryRun": True})
        found = invoke("etl.query", {"virtualFileId": vf, "query": {"cat": "c3"}})["result"]
    assert len(batch["content"]) == 45_000 and batch["hasNext"] and len(found) == 60_000 // 7 + (3 < 60_000 % 7)
    by_name = {d: (total, unit, done, calls) for d, total, unit, done, calls in ticks.bars}
    assert by_name[f"iterate {vf}"][:3] == (None, "rows", 45_000) and by_name[f"iterate {vf}"][3] > 1  # pages
    phases = [f"join {vf} × {vf}: building output", f"validate {vf}: checking rows",
              f"delete rows of {vf}: counting the rows to delete", f"query {vf}: indexing cat"]
    assert all(by_name[phase][:3] == (None, "", 0) for phase in phases)
    assert by_name[phases[0]][3] > 0 and by_name[phases[1]][3] > 0  # ticks while the statements ran
    assert [d for d, *_ in ticks.bars][-2:] == [f"query {vf}", f"query {vf}: indexing cat"]  # within the Query
    rest = invoke("etl.iterate", {"content": vf, "maxBatchSize": 45_000})  # the cursor moved by the batch
    assert len(rest["content"]) == 15_000 and not rest["hasNext"] and rest["content"][0]["id"] == "45000"


def test_a_phase_is_logged_by_its_time():
    from connector_ops.kernel.progress import PHASE, TICK_LINE_S, tick, track

    lines: list[str] = []
    with reporting_to(_log_lines(lines)), track("join a × b: building output", None, PHASE):
        tick()  # a tick writes at most a line a second, whatever the interval (here 0)
        assert lines == []
        time.sleep(TICK_LINE_S + 0.05)
        tick()
    assert lines[0].startswith("join a × b: building output: working for ")
    assert lines[-1].startswith("join a × b: building output: done in ")
