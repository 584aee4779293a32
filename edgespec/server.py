"""`edgespec serve`: the OpenAI HTTP API over the BatchEngine. This module parses requests, hands them to the
scheduler thread, and renders JSON and SSE; every bad request is an OpenAI-style error body with a 4xx.

Extensions beyond OpenAI's fields: `top_k`, `min_p`, `speculative: {"mode": "auto"|"off"|"draft"|"lookup"|"hybrid",
"draft_max": K}`, and llama-server's `timings` in every response.
"""
from __future__ import annotations

import asyncio
import json
import math
import threading
import time
import uuid
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from . import chat
from .batch import MODES, BatchEngine, Event, QueueFull, Request
from .errors import ContextOverflowError, EdgespecError
from .sampling import SamplingConfig


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, code: str | None = None, status: int = 400):
        super().__init__(message)
        self.param, self.code, self.status = param, code, status


def error(message: str, status: int = 400, param: str | None = None, code: str | None = None,
          kind: str | None = None) -> JSONResponse:
    kind = kind or ("invalid_request_error" if status < 500 else "server_error")
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status)


@dataclass
class ServerState:
    model_id: str
    defaults: SamplingConfig  # the serve command's sampling options: what a request that names none gets
    api_key: str | None = None
    engine: BatchEngine | None = None  # None while loading
    load_error: str | None = None
    created: int = field(default_factory=lambda: int(time.time()))


# request parsing ------------------------------------------------------------------------------------------------
def _number(body: dict, name: str, default, lo: float, hi: float, integer: bool = False):
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise BadRequest(f"'{name}' must be {'an integer' if integer else 'a number'}, got {json.dumps(value)}", name)
    if not math.isfinite(value) or not lo <= value <= hi:
        raise BadRequest(f"'{name}' must be between {lo} and {hi}, got {value}", name)
    return value


def _messages(body: dict) -> list[tuple[str, str]]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise BadRequest("'messages' must be a non-empty list of {role, content} objects", "messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer", "user", "assistant"):
            raise BadRequest(f"messages[{i}]: role must be one of system, developer, user, assistant",
                             f"messages[{i}].role")
        content = m.get("content")
        if content is None and m["role"] == "assistant":
            content = ""
        if isinstance(content, list):  # a list of parts: only text parts are understood
            texts = []
            for part in content:
                if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                    raise BadRequest(f"messages[{i}].content: only text parts are supported", f"messages[{i}].content")
                texts.append(part["text"])
            content = "".join(texts)
        if not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content must be a string or a list of text parts",
                             f"messages[{i}].content")
        out.append(("system" if m["role"] == "developer" else m["role"], content))
    return out


def _stop(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return [s for s in stop if s]
    raise BadRequest("'stop' must be a string or a list of strings", "stop")


def parse(body, state: ServerState, is_chat: bool) -> tuple[Request, dict]:
    """An OpenAI request body -> the engine's Request and how to render the answer."""
    engine = state.engine
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    n = body.get("n", 1)
    if n != 1:
        raise BadRequest("only n = 1 is supported", "n", "unsupported_value")
    if is_chat:
        tokens = chat.tokenize(engine.model, _messages(body))
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            tokens = engine.model.tokenize(prompt)  # a raw prompt, as written (llama.cpp's completion semantics)
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool)
                                                         for t in prompt):
            tokens = prompt
        else:
            raise BadRequest("'prompt' must be a string, a list of one string, or a list of token ids", "prompt")
    d = state.defaults
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = _number({"max_tokens": max_tokens}, "max_tokens", engine.target.n_ctx, 0, 10 ** 9, integer=True)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise BadRequest("'seed' must be an integer", "seed")
    sampling = SamplingConfig(temperature=_number(body, "temperature", d.temperature, 0, 2),
                              top_k=_number(body, "top_k", d.top_k, 0, 10 ** 6, integer=True),
                              top_p=_number(body, "top_p", d.top_p, 1e-9, 1),
                              min_p=_number(body, "min_p", d.min_p, 0, 1),
                              seed=None if seed is None or seed < 0 else seed % 2 ** 64)
    spec = body.get("speculative") or {}
    if not isinstance(spec, dict):
        raise BadRequest("'speculative' must be an object: {\"mode\": ..., \"draft_max\": K}", "speculative")
    mode = spec.get("mode", "auto")
    if mode not in MODES:
        raise BadRequest(f"unknown speculative mode {mode!r}; use one of {', '.join(MODES)}", "speculative.mode")
    draft_max = _number(spec, "draft_max", None, 0, 32, integer=True)
    if is_chat:
        want = body.get("logprobs")
        if want is not None and not isinstance(want, bool):
            raise BadRequest("'logprobs' must be true or false", "logprobs")
        logprobs = _number(body, "top_logprobs", 0, 0, 20, integer=True) if want else None
    else:
        logprobs = _number(body, "logprobs", None, 0, 5, integer=True)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be true or false", "stream")
    options = body.get("stream_options") or {}
    include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
    req = Request(list(tokens), max_tokens, sampling, _stop(body), mode, draft_max, logprobs)
    return req, {"stream": stream, "include_usage": include_usage, "chat": is_chat}


# rendering --------------------------------------------------------------------------------------------------------
def usage(req: Request, n_out: int) -> dict:
    return {"prompt_tokens": len(req.prompt), "completion_tokens": n_out, "total_tokens": len(req.prompt) + n_out}


def timings(stats) -> dict:
    gen_s = sum(r.seconds for r in stats.rounds)
    n = stats.n_tokens
    return {"prompt_n": stats.n_prompt_evaluated, "prompt_ms": 1000 * stats.prompt_s,
            "predicted_n": n, "predicted_ms": 1000 * gen_s,
            "predicted_per_second": n / gen_s if gen_s else None,
            "draft_n": stats.n_drafted, "draft_n_accepted": stats.n_accepted}


def _token_entry(model, token: int, logprob: float, top: list[tuple[int, float]]) -> dict:
    def one(t, lp):
        raw = model.piece(t)
        return {"token": raw.decode("utf-8", "replace"), "logprob": lp, "bytes": list(raw)}

    return {**one(token, logprob), "top_logprobs": [one(t, lp) for t, lp in top]}


def _finish(reason: str | None) -> str:
    return reason if reason in ("stop", "length") else "length" if reason else None


class Answer:
    """The events of one request, gathered as they come (for the final JSON and for logprobs)."""

    def __init__(self, state: ServerState, req: Request, how: dict) -> None:
        self.state, self.req, self.how = state, req, how
        self.id = ("chatcmpl-" if how["chat"] else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.text: list[str] = []
        self.logprobs: list[dict] = []
        self.n_out = 0

    def add(self, ev: Event) -> None:
        self.text.append(ev.text)
        if ev.token is not None:
            self.n_out += 1
            if ev.logprob is not None:
                self.logprobs.append(_token_entry(self.state.engine.model, ev.token, ev.logprob, ev.top))

    def _logprobs_block(self, entries: list[dict]):
        if self.req.logprobs is None:
            return None
        if self.how["chat"]:
            return {"content": entries}
        return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
                "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries]}

    def body(self, last: Event) -> dict:
        text = "".join(self.text)
        choice = {"index": 0, "logprobs": self._logprobs_block(self.logprobs), "finish_reason": _finish(last.finish_reason)}
        if self.how["chat"]:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return {"id": self.id, "object": "chat.completion" if self.how["chat"] else "text_completion",
                "created": self.created, "model": self.state.model_id, "choices": [choice],
                "usage": usage(self.req, self.n_out), "timings": timings(last.stats)}

    def chunk(self, ev: Event | None, first: bool = False, last: Event | None = None) -> dict:
        entries = []
        if ev is not None and ev.logprob is not None:
            entries = [_token_entry(self.state.engine.model, ev.token, ev.logprob, ev.top)]
        choice = {"index": 0, "logprobs": self._logprobs_block(entries) if ev is not None else None,
                  "finish_reason": _finish(last.finish_reason) if last is not None else None}
        text = ev.text if ev is not None else ""
        if self.how["chat"]:
            choice["delta"] = {"role": "assistant", "content": ""} if first else {"content": text} if ev else {}
        else:
            choice["text"] = text
        out = {"id": self.id, "object": "chat.completion.chunk" if self.how["chat"] else "text_completion",
               "created": self.created, "model": self.state.model_id, "choices": [choice]}
        if last is not None:
            out["timings"] = timings(last.stats)
        return out


def _sse(data) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


# the app ------------------------------------------------------------------------------------------------------------
def create_app(state: ServerState) -> Starlette:
    async def completions(request: HttpRequest, is_chat: bool) -> Response:
        if (denied := _auth(request)) is not None:
            return denied
        if state.engine is None:
            return error("the model is still loading", 503, code="model_loading")
        try:
            body = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError) as e:
            return error(f"the request body is not valid JSON: {e}")
        try:
            req, how = parse(body, state, is_chat)
            events: asyncio.Queue[Event] = asyncio.Queue()
            loop = asyncio.get_running_loop()
            req.on_event = lambda ev: loop.call_soon_threadsafe(events.put_nowait, ev)
            handle = state.engine.submit(req)
        except BadRequest as e:
            return error(str(e), e.status, e.param, e.code)
        except ContextOverflowError as e:
            return error(f"{e}; shorten the prompt or start the server with a larger --ctx-size", 400, "messages"
                         if is_chat else "prompt", "context_length_exceeded")
        except QueueFull as e:
            return error(f"{e}; try again later", 503, code="server_busy")
        except EdgespecError as e:
            return error(str(e), 400)
        answer = Answer(state, req, how)
        if how["stream"]:
            return StreamingResponse(_stream(answer, events, handle), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        finished = False
        try:
            while True:
                try:
                    ev = await asyncio.wait_for(events.get(), timeout=0.5)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        return Response(status_code=499)  # nobody to answer: the finally frees the sequence
                    continue
                answer.add(ev)
                if ev.finish_reason is None:
                    continue
                finished = True
                if ev.error:
                    return error(f"generation failed: {ev.error}", 500)
                return JSONResponse(answer.body(ev))
        finally:
            if not finished:
                handle.cancel()

    async def _stream(answer: Answer, events: asyncio.Queue, handle):
        done = False
        try:
            yield _sse(answer.chunk(None, first=True))
            while True:
                ev = await events.get()
                if ev.finish_reason is None:
                    answer.add(ev)
                    if ev.text or ev.logprob is not None:
                        yield _sse(answer.chunk(ev))
                    continue
                answer.add(ev)
                if ev.text:
                    yield _sse(answer.chunk(ev))
                if ev.error:
                    yield _sse({"error": {"message": f"generation failed: {ev.error}", "type": "server_error"}})
                yield _sse(answer.chunk(None, last=ev))
                if answer.how["include_usage"]:
                    yield _sse({"id": answer.id, "object": "chat.completion.chunk" if answer.how["chat"] else
                                "text_completion", "created": answer.created, "model": state.model_id,
                                "choices": [], "usage": usage(answer.req, answer.n_out)})
                yield "data: [DONE]\n\n"
                done = True
                return
        finally:
            if not done:  # the client went away mid-stream: free its sequence at the next step
                handle.cancel()

    def _auth(request: HttpRequest) -> Response | None:
        if state.api_key and request.headers.get("authorization") != f"Bearer {state.api_key}":
            return error("invalid or missing API key (send Authorization: Bearer KEY)", 401, code="invalid_api_key")
        return None

    async def chat_completions(request):
        return await completions(request, True)

    async def text_completions(request):
        return await completions(request, False)

    async def models(request):
        if (denied := _auth(request)) is not None:
            return denied
        return JSONResponse({"object": "list", "data": [{"id": state.model_id, "object": "model",
                                                         "created": state.created, "owned_by": "edgespec"}]})

    async def health(request):
        if state.load_error:
            return JSONResponse({"status": "error", "error": state.load_error}, 503)
        if state.engine is None:
            return JSONResponse({"status": "loading"}, 503)
        return JSONResponse({"status": "ok"})

    async def metrics(request):
        return PlainTextResponse(prometheus(state), media_type="text/plain; version=0.0.4")

    routes = [Route("/v1/chat/completions", chat_completions, methods=["POST"]),
              Route("/v1/completions", text_completions, methods=["POST"]),
              Route("/v1/models", models, methods=["GET"]), Route("/health", health, methods=["GET"]),
              Route("/metrics", metrics, methods=["GET"])]
    app = Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_allowed, 500: _server_error})
    return app


async def _not_found(request, exc):
    return error(f"no route {request.url.path}; the API is under /v1", 404, code="not_found")


async def _not_allowed(request, exc):
    return error(f"{request.method} is not allowed on {request.url.path}", 405, code="method_not_allowed")


async def _server_error(request, exc):
    return error(f"internal error: {type(exc).__name__}: {exc}", 500)


def prometheus(state: ServerState) -> str:
    e = state.engine
    m = e.metrics if e is not None else {}
    lines = []

    def put(name, kind, help_, samples):
        lines.append(f"# HELP edgespec_{name} {help_}")
        lines.append(f"# TYPE edgespec_{name} {kind}")
        for labels, value in samples:
            lines.append(f"edgespec_{name}{labels} {value}")

    put("requests_total", "counter", "Requests accepted.", [("", m.get("requests", 0))])
    put("prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", [("", m.get("prompt_tokens", 0))])
    put("generated_tokens_total", "counter", "Tokens generated.", [("", m.get("generated_tokens", 0))])
    put("drafted_tokens_total", "counter", "Tokens proposed, by proposer.",
        [(f'{{proposer="{p}"}}', m.get(f"drafted_{p}", 0)) for p in ("draft", "lookup")])
    put("accepted_tokens_total", "counter", "Proposed tokens the target accepted, by proposer.",
        [(f'{{proposer="{p}"}}', m.get(f"accepted_{p}", 0)) for p in ("draft", "lookup")])
    drafted = sum(m.get(f"drafted_{p}", 0) for p in ("draft", "lookup"))
    accepted = sum(m.get(f"accepted_{p}", 0) for p in ("draft", "lookup"))
    put("acceptance_rate", "gauge", "Accepted over proposed tokens.", [("", accepted / drafted if drafted else 0)])
    spec_rounds = m.get("rounds_speculative", 0)
    put("mean_accepted_length", "gauge", "Accepted tokens per speculative round.",
        [("", accepted / spec_rounds if spec_rounds else 0)])
    put("rounds_total", "counter", "Sequence rounds, speculative or plain, by why.",
        [(f'{{reason="{k[len("rounds_reason_"):]}"}}', v) for k, v in sorted(m.items())
         if k.startswith("rounds_reason_")])
    put("rounds_speculative_total", "counter", "Sequence rounds that verified drafted tokens.", [("", spec_rounds)])
    put("rounds_plain_total", "counter", "Sequence rounds without drafted tokens.", [("", m.get("rounds_plain", 0))])
    put("active_sequences", "gauge", "Sequences being generated.", [("", e.n_active if e else 0)])
    put("queued_requests", "gauge", "Requests waiting for a sequence.", [("", e.n_queued if e else 0)])
    steps = m.get("steps", 0)
    put("steps_total", "counter", "Target decodes (one per step, all sequences' rows).", [("", steps)])
    put("batch_rows_total", "counter", "Rows in all target decodes.", [("", m.get("batch_rows", 0))])
    put("batch_rows_last", "gauge", "Rows in the last target decode.", [("", m.get("last_batch_rows", 0))])
    return "\n".join(lines) + "\n"


def serve(state: ServerState, load, host: str, port: int, on_ready=None) -> None:
    """Start listening at once (GET /health says 503 while `load()` builds the engine), then serve until SIGINT or
    SIGTERM: every running request gets its final chunk, and this returns."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            if state.engine is not None:
                state.engine.stop("length")  # in-flight streams end with a final chunk
            if self.should_exit and sig == 2:
                self.force_exit = True
            self.should_exit = True  # not recorded as captured: a clean stop is exit 0

    server = Server(uvicorn.Config(create_app(state), host=host, port=port, log_level="warning",
                                   timeout_graceful_shutdown=30))
    scheduler: list[threading.Thread] = []

    def loader():
        try:
            engine = load()
        except BaseException as e:  # noqa: BLE001 - reported as the serve command's one line
            state.load_error = str(e) or type(e).__name__
            server.should_exit = True
            return
        state.engine = engine
        t = threading.Thread(target=engine.run, name="edgespec-scheduler", daemon=True)
        t.start()
        scheduler.append(t)
        if on_ready:
            on_ready(engine)
        if server.should_exit:
            engine.stop("length")

    threading.Thread(target=loader, name="edgespec-loader", daemon=True).start()
    server.run()
    if state.engine is not None:
        state.engine.stop("length")
        for t in scheduler:
            t.join(timeout=30)
        state.engine.close()
    if state.load_error:
        raise EdgespecError(state.load_error)
