"""The local web server: a Starlette app with the JSON API the pages read and the packaged front end, run by
uvicorn on 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from aft_bench.common.errors import InputError
from aft_bench.viewer.model import Viewer

STATIC = Path(__file__).with_name("static")


def _json(data: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(data, status_code=status, headers={"Cache-Control": "no-store"})


def build_app(viewer: Viewer, static: Path = STATIC) -> Starlette:
    """The app: `/` (index.html), `/static/*` (the front end) and `/api/*` (JSON)."""

    async def index(_: Request) -> Response:
        return FileResponse(static / "index.html")

    async def figure(request: Request) -> Response:
        name = request.path_params["name"]
        path = viewer.directory / "report" / name
        if "/" in name or not name.endswith(".png") or not path.is_file():
            return _json({"error": "not found"}, 404)
        return FileResponse(path)

    def guarded(fn: Any) -> Any:
        async def handler(request: Request) -> Response:
            viewer.refresh()
            try:
                out = fn(request)
            except InputError as exc:
                return _json({"error": str(exc)}, 400)
            return _json({"error": "not found"}, 404) if out is None else _json(out)
        return handler

    routes = [
        Route("/", index),
        Route("/api/status", guarded(lambda r: viewer.status())),
        Route("/api/experiment", guarded(lambda r: viewer.experiment())),
        Route("/api/scorecards", guarded(lambda r: viewer.scorecards())),
        Route("/api/facets", guarded(lambda r: viewer.facets())),
        Route("/api/runs", guarded(lambda r: viewer.query(dict(r.query_params)))),
        Route("/api/run/{run_id}", guarded(lambda r: viewer.run(r.path_params["run_id"]))),
        Route("/api/pairs", guarded(lambda r: viewer.pair_list(r.query_params.get("comparison")))),
        Route("/api/pair/{comparison}/{run_id}",
              guarded(lambda r: viewer.pair(r.path_params["comparison"], r.path_params["run_id"]))),
        Route("/api/figure/{name}", figure),
        Mount("/static", StaticFiles(directory=static), name="static"),
    ]
    return Starlette(routes=routes)


def serve(viewer: Viewer, sock: socket.socket, static: Path = STATIC) -> None:
    """Serve until Ctrl-C (uvicorn handles the signal and returns)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(build_app(viewer, static), log_level="warning"))
    server.run(sockets=[sock])
