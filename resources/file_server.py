"""The platform file server: ``GET /files/<id>`` streams a stored file (ASGI, served by uvicorn).

Ids are checked by the store (random hex only), so no request path ever reaches the file system.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import IO
from urllib.parse import quote

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from connector_ops.kernel.errors import NotFound
from connector_ops.resources.platform_files import CHUNK, PlatformFileStore


def _chunks(store: PlatformFileStore, file_id: str) -> Iterator[bytes]:
    with store.open_stored(file_id) as stream:
        while chunk := stream.read(CHUNK):
            yield chunk


class _OpenFileResponse(FileResponse):
    """A ``FileResponse`` (ranges, ``ETag``, ``Last-Modified``) of a file opened before answering. Starlette's
    stats and opens the path only while it answers, so a file deleted meanwhile was a 500 or a body cut after
    its headers; an open file stays readable whole however it is removed (POSIX), so here every byte comes
    from the handle and never from the path again."""

    def __init__(self, handle: IO[bytes], media_type: str, headers: Mapping[str, str]) -> None:
        super().__init__(handle.name, media_type=media_type, headers=headers, stat_result=os.fstat(handle.fileno()))
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


def create_app(store: PlatformFileStore) -> Starlette:
    def get_file(request: Request) -> Response:  # blocking lookups: Starlette runs it in a worker thread
        file_id = request.path_params["file_id"]
        try:
            descriptor = store.describe(file_id)
            handle = None if store.files_database_url else store.data_path(file_id).open("rb")
        except (NotFound, FileNotFoundError):
            return JSONResponse({"message": "not found"}, status_code=404)
        name = descriptor.name or file_id
        media_type = descriptor.content_type or "application/octet-stream"
        headers = {"Content-Disposition": f"inline; filename*=UTF-8''{quote(name, safe='')}"}
        if handle is not None:
            return _OpenFileResponse(handle, media_type=media_type, headers=headers)
        # in the database: streamed a chunk at a time (bounded memory), the length from the descriptor
        if descriptor.size is not None:
            headers["Content-Length"] = str(descriptor.size)
        if request.method == "HEAD":
            return Response(media_type=media_type, headers=headers)
        return StreamingResponse(_chunks(store, file_id), media_type=media_type, headers=headers)

    async def health(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[
        Route("/files/{file_id}", get_file, methods=["GET", "HEAD"]),
        Route("/health", health),
    ])


def serve(store: PlatformFileStore, host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(create_app(store), host=host, port=port, log_level="info")
