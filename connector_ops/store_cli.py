"""``connector-ops store …``: the stores themselves. ``store copy`` moves the files of the home's default stores
(or of the stores its ``--from-…`` options name) into the stores the current settings use
(:mod:`connector_ops.store_copy`)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import click

from connector_ops.cli import PROG, answered, no_progress_option, showing_progress


@click.group()
def store() -> None:
    """The stores themselves: copy their files into the stores the settings use."""


@store.command("copy")
@click.option("--from-database-url", metavar="URL",
              help="the virtual-file store to copy from (default: the home's sqlite:///$CONNECTOR_OPS_HOME/"
                   "virtual_files.db)")
@click.option("--from-files-backend", type=click.Choice(["local", "database"]), default="local", show_default=True,
              help="where the platform files to copy are: a folder (--from-files-dir) or the database of "
                   "--from-database-url")
@click.option("--from-files-dir", metavar="DIR", type=click.Path(file_okay=False),
              help="the platform-file folder to copy from (default: $CONNECTOR_OPS_HOME/files)")
@click.option("--map", "map_path", metavar="PATH", type=click.Path(dir_okay=False),
              help="CSV file of kind,old_id,new_id: a line added after each copy; a re-run skips what the "
                   "destination holds a copy of and adds the lines a stop cut (required unless --dry-run)")
@click.option("--dry-run", is_flag=True, help="list what would be copied, with sizes (a PostgreSQL file's rows as "
                                               "PostgreSQL estimates them, where it does); copy nothing")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@no_progress_option
def copy(from_database_url: str | None, from_files_backend: str, from_files_dir: str | None, map_path: str | None,
         dry_run: bool, as_json: bool, no_progress: bool) -> int:
    """Copy every virtual file and platform file of the old stores into the stores the current settings use
    (CONNECTOR_OPS_DATABASE_URL, CONNECTOR_OPS_FILES_BACKEND): each copy gets a new id, written to --map as
    soon as it is committed. Run it again with the same --map after a failure: it copies only the rest.
    An asset's data (asset:<key>) is not copied: run its job again.

    Exit codes: 0 every file copied (or already), 1 a file failed (the others were copied) or the copy
    stopped, 2 invalid input (the source stores are the ones in use), 3 the --from-database-url file is not there."""
    from connector_ops.resources.virtual_files.urls import database_url_problem
    from connector_ops.session import Session
    from connector_ops.store_copy import CopyResult, IdMap, copy_all, plan

    if map_path is None and not dry_run:
        raise click.UsageError("--map PATH is required: the file the old -> new ids are written to")
    if from_database_url is not None and (problem := database_url_problem(from_database_url)):
        raise click.BadParameter(problem, param_hint="--from-database-url")
    with _naming_the_source(from_database_url), Session() as now, \
            Session(_source_environ(now.environ(), from_database_url, from_files_backend, from_files_dir)) as was:
        keys = ["virtual_files", "platform_files"]
        dest, source = now.resources_for(keys), was.resources_for(keys)
        if from_database_url is not None:  # a mistyped SQLite path is no empty store (and is left unmade)
            _check_exists(source["virtual_files"])
        source["platform_files"].keep_leftovers()  # the source is read, never changed (not even swept)
        result = CopyResult(dry_run=dry_run)
        kinds = _kinds(source, dest, result)
        id_map = IdMap(map_path) if map_path is not None else None
        result.items = plan(source, dest, id_map, kinds, estimate=dry_run)
        for item in result.items:
            if item.status == "asset (not copied)":
                click.echo(f"{PROG}: notice: {item.old_id} is an asset's data, not copied: run its job again",
                           err=True)
            elif item.status == "already copied" and not as_json:
                click.echo(f"already copied {_what(item)} -> {item.new_id}")
            elif dry_run and not as_json:
                click.echo(f"would copy {_what(item)} ({_size(item)})")
        if not dry_run:
            assert id_map is not None
            with showing_progress(not no_progress):
                copy_all(source, dest, result.items, id_map, lambda item: _told(item, as_json))
        answered()  # copied and mapped: a Ctrl-C while the sessions close changes nothing
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
    else:
        _summary(result, map_path)
    return 1 if result.failed else 0


@contextlib.contextmanager
def _naming_the_source(from_database_url: str | None) -> Iterator[None]:
    """A database of ``--from-database-url`` that cannot be reached is said to be that option's: the store's
    error names CONNECTOR_OPS_DATABASE_URL, where a store's URL comes from, which here names the destination."""
    from sqlalchemy import URL, make_url

    from connector_ops.resources.virtual_files.db_errors import DatabaseUnreachable, without_password
    from connector_ops.resources.virtual_files.engines import normalise_url

    def bare(url: str | URL) -> str:  # as the engines key URLs, less the password (the error's URL keeps none)
        return normalise_url(without_password(make_url(url)).render_as_string(hide_password=False))

    try:
        yield
    except DatabaseUnreachable as exc:
        if from_database_url is None or exc.url is None or bare(exc.url) != bare(from_database_url):
            raise
        raise exc.named("--from-database-url") from None


def _check_exists(store: Any) -> None:
    """The virtual-file store's own check, its message naming the option the path came from."""
    from connector_ops.kernel.errors import NotFound

    try:
        store.check_exists()
    except NotFound:
        raise NotFound(f"--from-database-url: the SQLite file {store.sqlite_file} does not exist") from None


def _source_environ(environ: dict[str, str], database_url: str | None, files_backend: str,
                    files_dir: str | None) -> dict[str, str]:
    """The settings that make the source stores: the home's defaults, or the ``--from-…`` options."""
    source = {k: v for k, v in environ.items()
              if k not in ("CONNECTOR_OPS_DATABASE_URL", "CONNECTOR_OPS_FILES_DIR")}
    source["CONNECTOR_OPS_FILES_BACKEND"] = files_backend
    if database_url is not None:
        source["CONNECTOR_OPS_DATABASE_URL"] = database_url
    if files_dir is not None:
        source["CONNECTOR_OPS_FILES_DIR"] = files_dir
    return source


def _kinds(source: dict[str, Any], dest: dict[str, Any], result: Any) -> tuple[str, ...]:
    """The kinds of files to copy: those whose source store is not the destination's. Refused when neither is."""
    from connector_ops.store_copy import PLATFORM, VIRTUAL, same_platform_store, same_virtual_store

    same = {VIRTUAL: same_virtual_store(source["virtual_files"], dest["virtual_files"]),
            PLATFORM: same_platform_store(source["platform_files"], dest["platform_files"])}
    if all(same.values()):
        raise click.UsageError(
            "the stores to copy from are the ones the current settings use, so there is nothing to copy: set "
            "CONNECTOR_OPS_DATABASE_URL (and CONNECTOR_OPS_FILES_BACKEND=database) to the new stores, or name the "
            "old ones with --from-database-url, --from-files-backend, --from-files-dir")
    for kind, words in ((VIRTUAL, "virtual files"), (PLATFORM, "platform files")):
        if same[kind]:
            result.skipped_stores.append(words)
            click.echo(f"{PROG}: notice: the {words} are already in the store the settings use: not copied", err=True)
    return tuple(kind for kind, is_same in same.items() if not is_same)


def _what(item: Any) -> str:
    return f"{item.kind.replace('_', ' ')} {item.old_id}"


def _size(item: Any) -> str:
    from connector_ops.kernel.disk import shown_size
    from connector_ops.store_copy import VIRTUAL

    if item.size is None:
        return "size unknown"
    if item.kind != VIRTUAL:
        return shown_size(item.size)
    return f"about {item.size:,} rows" if item.estimated else f"{item.size:,} rows"


def _told(item: Any, as_json: bool) -> None:
    """One line as each file is done (stdout, flushed: a script reading it sees each copy as it is mapped)."""
    if item.status == "failed":
        click.echo(f"{PROG}: error: {_what(item)} not copied: {item.error}", err=True)
    elif not as_json:
        click.echo(f"copied {_what(item)} -> {item.new_id} ({_size(item)})")
        sys.stdout.flush()


def _summary(result: Any, map_path: str | None) -> None:
    from connector_ops.store_copy import PLATFORM, VIRTUAL

    verb = "would copy" if result.dry_run else "copied"
    status = "to copy" if result.dry_run else "copied"
    line = (f"{verb} {result.count(VIRTUAL, status)} virtual file(s) and {result.count(PLATFORM, status)} platform "
            f"file(s)")
    already = sum(1 for item in result.items if item.status == "already copied")
    if already:
        line += f"; {already} already copied (named in {map_path})"
    assets = sum(1 for item in result.items if item.status == "asset (not copied)")
    if assets:
        line += f"; {assets} asset file(s) not copied"
    if result.failed:
        line += f"; {len(result.failed)} failed (stderr says why): run the same command again once that is fixed"
    elif not result.dry_run:
        line += f"; old -> new ids in {map_path}"
    click.echo(line)
