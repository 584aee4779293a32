"""`edgespec serve`'s log: one line on stderr per request when it ends, as llama-server and Ollama print theirs: who
asked, for what, the status and time, and what a generation made (prompt tokens and how many came from the cache,
tokens generated and their speed, drafted tokens accepted) or, for a refused request, why. Health checks and
metrics scrapes are left out (a monitor polls them every few seconds)."""
from __future__ import annotations

import json
import time
from typing import Callable

QUIET_PATHS = ("/health", "/metrics")


def generation(prompt_tokens: int, stats) -> str:
    """What a finished generation made, for the request's line."""
    if stats is None:
        return ""
    cached = prompt_tokens - stats.n_prompt_evaluated
    out = f"{prompt_tokens} prompt tokens{f' ({cached} cached)' if cached > 0 else ''}, {stats.n_tokens} generated"
    if stats.tokens_per_s:
        out += f" at {stats.tokens_per_s:.1f} tok/s"
    if stats.n_drafted:
        out += f", {stats.n_accepted} of {stats.n_drafted} drafted accepted"
    return out


def _reason(body: bytes) -> str:
    """An error body's message, whichever API's shape it has."""
    try:
        error = json.loads(body)["error"]
        return error if isinstance(error, str) else str(error["message"])
    except (ValueError, KeyError, TypeError):
        return body.decode("utf-8", "replace")[:200]


class RequestLog:
    """ASGI middleware handing each request's line to `write` (the serve command's: stderr) once its answer, a whole
    stream included, has gone. A handler says what its generation made in `request.state.generated`."""

    def __init__(self, app, write: Callable[[str], None]) -> None:
        self.app, self.write = app, write

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in QUIET_PATHS:
            return await self.app(scope, receive, send)
        start, status, error = time.perf_counter(), [499], bytearray()  # (499: the client left before an answer)

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            elif message["type"] == "http.response.body" and status[0] >= 400 and len(error) < 4096:
                error.extend(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            client = (scope.get("client") or ("?",))[0]
            what = _reason(bytes(error)) if status[0] >= 400 and error else \
                (scope.get("state") or {}).get("generated", "")
            line = f"edgespec: {client} {scope['method']} {scope['path']} {status[0]} in " \
                   f"{time.perf_counter() - start:.2f} s{': ' + what if what else ''}"
            self.write(line)
