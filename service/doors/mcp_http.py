"""The /mcp door's HTTP guard: a request body is held to the same limit as every HTTP body (MAX_BODY_BYTES)
and must be JSON before the MCP SDK sees it, so that every bad body is a JSON-RPC error with a 4xx status
(the SDK's own parser answered 500 to invalid UTF-8 and to JSON nested deeper than Python recurses, and its
own limit is 4 MiB with a plain-text 413)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import msgspec

from service.schemas import is_utf8

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


async def _error(send: Send, status: int, code: int, message: str) -> None:
    body = msgspec.json.encode({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _problem(body: bytes) -> str | None:
    """Why the body is not a JSON document the SDK can read; None if it is."""
    if not is_utf8(body):  # our own check: msgspec's wording of it changed in 0.23
        return "parse error: the body is not valid UTF-8"
    try:
        msgspec.json.decode(body)
    except RecursionError:
        return "parse error: the body is nested too deeply"
    except msgspec.DecodeError as exc:
        return f"parse error: {exc}"
    return None


def guarded(app: App, max_body_bytes: int) -> App:
    """`app` behind the guard: a POST's body is read whole (at most `max_body_bytes`), checked, and handed on."""

    async def guard(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max_body_bytes:
                await _error(send, 413, INVALID_REQUEST, f"request body over {max_body_bytes} bytes (MAX_BODY_BYTES)")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if (problem := _problem(body)) is not None:
            await _error(send, 400, PARSE_ERROR, problem)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the client's disconnect, as the server tells it

        await app(scope, replay, send)

    return guard
