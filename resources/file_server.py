"""The platform file server: ``GET /files/<id>`` streams a stored file (ASGI, served by uvicorn).

Ids are checked by the store (random hex only), so no request path ever reaches the file system.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
from collections.abc import AsyncIterator, Iterator, Mapping
from email.utils import parsedate_to_datetime
from typing import IO, Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from connector_ops.kernel.errors import ConnectorOpsError, NotFound
from connector_ops.resources.connection_budget import connection_limits
from connector_ops.resources.file_headers import file_headers
from connector_ops.resources.platform_files import CHUNK, PlatformFileStore

#: the server's own log (uvicorn's): where its "Exception in ASGI application" tracebacks went
_log = logging.getLogger("uvicorn.error")

#: a process or the system short of a resource for a moment (descriptors, memory, buffers): gone once other
#: downloads end, so a client may try again
_TRANSIENT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS, errno.EAGAIN})


def _chunks(stream: IO[bytes]) -> Iterator[bytes]:
    while chunk := stream.read(CHUNK):
        yield chunk


class _StoredStreamResponse(StreamingResponse):
    """A file of the database streamed a chunk at a time (bounded memory) from a stream opened before
    answering (one snapshot: a file gone first is a 404, one deleted meanwhile still arrives whole),
    closed however the response ends (its connection goes back to the pool)."""

    def __init__(self, stream: IO[bytes], headers: Mapping[str, str]) -> None:
        super().__init__(_chunks(stream), headers=headers)
        self._stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if scope["method"] == "HEAD":
                await Response(headers=self.headers)(scope, receive, send)
            else:
                await super().__call__(scope, receive, send)
        finally:
            self._stream.close()


class _OpenFileResponse(FileResponse):
    """A ``FileResponse`` (ranges, ``ETag``, ``Last-Modified``) of a file opened before answering. Starlette's
    stats and opens the path only while it answers, so a file deleted meanwhile was a 500 or a body cut after
    its headers; an open file stays readable whole however it is removed (POSIX), so here every byte comes
    from the handle and never from the path again."""

    def __init__(self, handle: IO[bytes], headers: Mapping[str, str]) -> None:
        super().__init__(handle.name, headers=headers, stat_result=os.fstat(handle.fileno()))
        self._handle = handle

    @contextlib.asynccontextmanager
    async def _open_file(self) -> AsyncIterator[anyio.AsyncFile[bytes]]:
        self._handle.seek(0)
        yield anyio.wrap_file(self._handle)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        extensions = {k: v for k, v in scope.get("extensions", {}).items() if k != "http.response.pathsend"}
        try:  # never by path (a server offering "pathsend" would open it again)
            await super().__call__({**scope, "extensions": extensions}, receive, send)
        finally:
            self._handle.close()


def _os_error_response(file_id: str, exc: OSError) -> JSONResponse:
    """The answer to a lookup the system refused: a 503 with ``Retry-After`` for a shortage that passes (too
    many open files under many parallel downloads), else a 500; either way said in the message shape of the
    other errors and logged on one line, since a traceback of a known cause only buries the cause."""
    reason = os.strerror(exc.errno) if exc.errno is not None else str(exc)
    if exc.errno in _TRANSIENT_ERRNOS:
        _log.warning("file %s not served (503, retry later): %s", file_id, reason)
        return JSONResponse({"message": f"the file server is short of resources ({reason}); retry later"},
                            status_code=503, headers={"Retry-After": "1"})
    _log.error("file %s not served (500): %s", file_id, reason)
    return JSONResponse({"message": f"the file server could not read the file ({reason})"}, status_code=500)


def _not_modified(request: Request, response: Response) -> bool:
    """Whether the client's copy is current (RFC 9110, 13.1.2 and 13.1.4): ``If-None-Match`` naming the
    ``ETag`` (weakly compared), else ``If-Modified-Since`` not before ``Last-Modified``."""
    if_none_match = request.headers.get("if-none-match")
    if if_none_match is not None:
        tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
        return "*" in tags or response.headers["etag"] in tags
    try:
        since = parsedate_to_datetime(request.headers.get("if-modified-since", ""))
        return since >= parsedate_to_datetime(response.headers["last-modified"])
    except (TypeError, ValueError):  # absent or not a date: ignored, as the RFC says
        return False


def create_app(store: PlatformFileStore) -> Starlette:
    def get_file(request: Request) -> Response:  # blocking lookups: Starlette runs it in a worker thread
        file_id = request.path_params["file_id"]
        try:
            descriptor = store.describe(file_id)
            handle = store.open_stored(file_id, detached=True)  # a client may stall: no connection held
        except (NotFound, FileNotFoundError):
            return JSONResponse({"message": "not found"}, status_code=404)
        except ConnectorOpsError as exc:  # the database busy (a 503 to retry), a privilege refused: said, no traceback
            retry = {"Retry-After": "1"} if exc.retryable else {}
            return JSONResponse({"message": str(exc)}, status_code=exc.status, headers=retry)
        except OSError as exc:  # too many open files (a 503 to retry), an unreadable disk: said, no traceback
            return _os_error_response(file_id, exc)
        name = descriptor.name or file_id
        headers = file_headers(name, descriptor.content_type or "application/octet-stream")
        if store.files_database_url is None:
            response = _OpenFileResponse(handle, headers=headers)
            if _not_modified(request, response):
                handle.close()
                kept = ("etag", "last-modified", "content-security-policy")  # a 304 updates the cached copy's headers
                return Response(status_code=304, headers={k: response.headers[k] for k in kept})
            return response
        if descriptor.size is not None:
            headers["Content-Length"] = str(descriptor.size)
        return _StoredStreamResponse(handle, headers=headers)

    async def health(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[
        Route("/files/{file_id}", get_file, methods=["GET", "HEAD"]),
        Route("/health", health),
    ])


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (``OSError`` if it cannot be: in use, no such address). Bound here,
    not by uvicorn, which logs a traceback-less error and exits 3, the CLI's code for "not found"."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)


def _store_descriptors(store: PlatformFileStore) -> int:
    """Descriptors the store's database connections may hold: a full pool of them (``pool_settings``: for
    SQLite SQLAlchemy's same default of 5 + 10) at four each, a SQLite file with its ``-wal``, ``-shm`` and a
    journal or temporary file (docs/deployment.md; a PostgreSQL connection needs one); none for a folder,
    whose files are counted per connection."""
    if store.files_database_url is None:
        return 0
    from connector_ops.resources.virtual_files.pool_settings import pool_settings

    pool = pool_settings()
    return 4 * (pool["pool_size"] + pool["max_overflow"])


def _one_line_accept_shortage(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """asyncio's "socket.accept() out of system resource" as one line (its default is a traceback): the
    connections keep waiting in the backlog and are accepted a second later, nothing failed."""
    exc = context.get("exception")
    if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
        _log.warning("connections wait a second to be accepted: %s", os.strerror(exc.errno or 0))
    else:
        loop.default_exception_handler(context)


def serve(store: PlatformFileStore, sock: socket.socket) -> None:
    """Serve the store's files on ``sock`` (:func:`listening_socket`) until interrupted, taking no more
    connections at once than its descriptors allow (:mod:`.connection_budget`: above, uvicorn's 503).

    On asyncio's event loop, not uvloop: out of descriptors for a connection, libuv accepts every waiting
    one and closes it (their clients see a reset), where asyncio leaves them waiting for a second."""
    import uvicorn

    store.sweep()  # the server's start removes crash leftovers, however recently another process did
    host, port = sock.getsockname()[:2]
    limits = connection_limits(_store_descriptors(store))
    server = uvicorn.Server(uvicorn.Config(create_app(store), host=host, port=port, log_level="info",
                                           limit_concurrency=limits.concurrency, backlog=limits.backlog))

    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(_one_line_accept_shortage)
        await server.serve(sockets=[sock])

    asyncio.run(run())  # asyncio's own loop (uvicorn's run would take uvloop where installed)
