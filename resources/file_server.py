"""The platform file server: ``GET /files/<id>`` streams a stored file (ASGI, served by uvicorn).

Ids are checked by the store (random hex only), so no request path ever reaches the file system.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from connector_ops.kernel.errors import NotFound
from connector_ops.resources.platform_files import CHUNK, PlatformFileStore


def _chunks(store: PlatformFileStore, file_id: str) -> Iterator[bytes]:
    with store.open_stored(file_id) as stream:
        while chunk := stream.read(CHUNK):
            yield chunk


def create_app(store: PlatformFileStore) -> Starlette:
    async def get_file(request: Request) -> Response:
        file_id = request.path_params["file_id"]
        try:
            descriptor = store.describe(file_id)
            path = None if store.files_database_url else store.data_path(file_id)
        except NotFound:
            return JSONResponse({"message": "not found"}, status_code=404)
        name = descriptor.name or file_id
        media_type = descriptor.content_type or "application/octet-stream"
        headers = {"Content-Disposition": f"inline; filename*=UTF-8''{quote(name, safe='')}"}
        if path is not None:
            return FileResponse(path, media_type=media_type, headers=headers)
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
