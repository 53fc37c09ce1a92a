"""The HTTP face of the gateway (FastAPI, served by uvicorn): OpenAI's routes and the
session routes.

    GET  /v1/models                      the served model
    POST /v1/chat/completions            a call (protocol.py says what is served)
    POST /v1/sessions/{id}/reward        close a session with its reward (rewards.py)
    GET  /v1/sessions/{id}               open, written, or 404

Every error is JSON in OpenAI's shape with a 4xx/5xx status: 400 for what is not served,
401 without a valid key (when keys are set: then on every route, loopback too), 404, 413
for a body over `gateway.max_request_bytes` (checked while reading it, not after), 429 over
`gateway.requests_per_minute`, 503 when the engine's queue is full.

Session of a call: the `X-Flywheel-Session` request header, else `metadata.session_id`,
else `user`, else by conversation prefix (sessions.py). The response carries the session's
id in its own `X-Flywheel-Session` header; the reward call takes that id or the client's key.
`X-Flywheel-Workload` (or `metadata.workload`) names the session's workload.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException

from flywheel.gateway.protocol import GatewayError, bad, parse_chat_request
from flywheel.gateway.replies import completion_body, logprobs_content, stream_chunks
from flywheel.gateway.service import Gateway

log = logging.getLogger("flywheel.gateway")
SESSION_HEADER, WORKLOAD_HEADER = "x-flywheel-session", "x-flywheel-workload"


async def read_json(request: Request, limit: int):
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > limit:
        raise GatewayError(413, f"the request body is {size} bytes; the gateway takes at most {limit}",
                           "invalid_request_error", None, "request_too_large")  # fmt: skip
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise GatewayError(413, f"the request body is over {limit} bytes", "invalid_request_error", None,
                               "request_too_large")  # fmt: skip
    try:
        return json.loads(body) if body else None
    except ValueError:
        raise bad("the request body is not valid JSON") from None


def build_app(gw: Gateway) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app):
        async def sweeper():
            interval = max(0.05, min(5.0, gw.config.session_timeout_s / 4))
            while True:
                await asyncio.sleep(interval)
                try:
                    await gw.sweep()
                except Exception:  # noqa: BLE001  (a failed sweep must not stop the next)
                    log.exception("session sweep failed")

        task = asyncio.create_task(sweeper())
        yield
        task.cancel()  # open sessions stay in the spool: a restarted gateway goes on with them

    app = FastAPI(
        title="flywheel gateway", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )

    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, exc: GatewayError):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return JSONResponse(
            GatewayError(exc.status_code, str(exc.detail)).body(), status_code=exc.status_code
        )

    @app.exception_handler(Exception)
    async def bug(
        request: Request, exc: Exception
    ):  # still JSON in OpenAI's shape; the log has the traceback
        log.exception("unhandled error on %s", request.url.path)
        return JSONResponse(
            GatewayError(500, f"internal error: {exc}", "server_error").body(), status_code=500
        )

    def caller(request: Request) -> str:
        client = gw.client_of(request.headers.get("authorization"))
        gw.admit(client)
        return client

    @app.get("/v1/models")
    async def models(request: Request):
        caller(request)
        return {"object": "list", "data": [{"id": gw.config.model_name, "object": "model", "created": 0,
                                            "owned_by": "flywheel", "policy": gw.policy}]}  # fmt: skip

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        client = caller(request)
        req = parse_chat_request(await read_json(request, gw.config.max_request_bytes), gw.config.max_n)
        key, grouped_by = request.headers.get(SESSION_HEADER), "header"
        if not key and req.metadata.get("session_id"):
            key, grouped_by = req.metadata["session_id"], "metadata"
        elif not key and req.user:
            key, grouped_by = req.user, "user"
        grouped_by = grouped_by if key else "prefix"
        workload = request.headers.get(WORKLOAD_HEADER) or req.metadata.get("workload") or gw.config.workload
        session, call = await gw.complete(req, client, key or None, grouped_by, workload)
        choices = [
            {"message": c.message, "finish_reason": c.finish_reason, "token_ids": c.token_ids,
             "logprobs": logprobs_content(gw.tok, c.token_ids, c.logprobs) if req.logprobs else None}
            for c in call.choices
        ]  # fmt: skip
        completion = sum(len(c.token_ids) for c in call.choices)
        usage = {"prompt_tokens": len(call.prompt_ids), "completion_tokens": completion,
                 "total_tokens": len(call.prompt_ids) + completion}  # fmt: skip
        cid, headers = f"chatcmpl-{uuid.uuid4().hex}", {"X-Flywheel-Session": session.id}
        if req.stream:
            lines = stream_chunks(
                gw.tok, cid, req.model, gw.policy, choices, usage if req.include_usage else None
            )
            return StreamingResponse(lines, media_type="text/event-stream", headers=headers)
        return JSONResponse(completion_body(cid, req.model, gw.policy, choices, usage), headers=headers)

    @app.post("/v1/sessions/{ref}/reward")
    async def reward(ref: str, request: Request):
        client = caller(request)
        return await gw.reward(client, ref, await read_json(request, gw.config.max_request_bytes))

    @app.get("/v1/sessions/{ref}")
    async def session_status(ref: str, request: Request):
        return gw.status(caller(request), ref)

    app.state.started = time.time()
    return app


def serve(gw: Gateway, host: str, port: int, log_level: str = "warning") -> None:
    """Serve until SIGINT/SIGTERM (uvicorn's own handling); open sessions stay in the spool."""
    import uvicorn

    uvicorn.run(build_app(gw), host=host, port=port, log_level=log_level)
