"""The platform file server: ``GET /files/<id>`` streams a stored file (ASGI, served by uvicorn).

Ids are checked by the store (random hex only), so no request path ever reaches the file system.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from connector_ops.kernel.errors import NotFound
from connector_ops.resources.platform_files import PlatformFileStore


def create_app(store: PlatformFileStore) -> Starlette:
    async def get_file(request: Request) -> Response:
        file_id = request.path_params["file_id"]
        try:
            descriptor = store.describe(file_id)
            path = store.data_path(file_id)
        except NotFound:
            return JSONResponse({"message": "not found"}, status_code=404)
        name = descriptor.name or file_id
        return FileResponse(
            path,
            media_type=descriptor.content_type or "application/octet-stream",
            headers={"Content-Disposition": f"inline; filename*=UTF-8''{quote(name, safe='')}"},
        )

    async def health(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[
        Route("/files/{file_id}", get_file, methods=["GET", "HEAD"]),
        Route("/health", health),
    ])


def serve(store: PlatformFileStore, host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(create_app(store), host=host, port=port, log_level="info")
