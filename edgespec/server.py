"""`edgespec serve`: the OpenAI HTTP API over the BatchEngine: routes, authentication, the hand-over of requests to the
scheduler thread and of events back to the client, and the server's life from load to a clean stop. Each wire format
has its own module: openai_api.py (chat and text completions), responses_api.py (OpenAI's Responses API),
anthropic_api.py (Anthropic's Messages API), ollama_api.py (Ollama's /api), llama_api.py (llama-server's /completion,
/infill, /tokenize, /detokenize and /props, which editors' plugins and UIs call); prometheus.py writes /metrics and
request_log.py a line per request; choices.py merges OpenAI's n answers of one request. Every bad request is an
OpenAI-style error body with a 4xx (in Anthropic's and Ollama's shapes on their routes). A browser at / gets a chat
page (webui.py).

Extensions beyond OpenAI's fields: `top_k`, `min_p`, `speculative: {"mode": "auto"|"off"|"draft"|"lookup"|"hybrid",
"draft_max": K}`, and llama-server's `timings` in every response.
"""
from __future__ import annotations

import asyncio
import json
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from .batch import BatchEngine, Event, QueueFull
from .errors import ContextOverflowError, EdgespecError
from .listening import listen
from . import anthropic_api, choices, fields, llama_api, ollama_api, prometheus, responses_api, webui
from .openai_api import Answer, BadRequest, parse
from .request_log import RequestLog, generation
from .sampling import SamplingConfig


def error(message: str, status: int = 400, param: str | None = None, code: str | None = None,
          kind: str | None = None) -> JSONResponse:
    kind = kind or ("invalid_request_error" if status < 500 else "server_error")
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status)


@dataclass
class ServerState:
    model_id: str
    defaults: SamplingConfig  # the serve command's sampling options: what a request that names none gets
    api_key: str | None = None
    origins: tuple[str, ...] = ()  # web pages' origins allowed to call from a browser (CORS); "*" any
    engine: BatchEngine | None = None  # None while loading
    load_error: str | None = None
    created: int = field(default_factory=lambda: int(time.time()))
    responses: responses_api.Store = field(default_factory=responses_api.Store)  # for previous_response_id
    log: Callable[[str], None] | None = None  # where a line per request goes (request_log.py); None: nowhere
    webui: bool = True  # the chat page at / for a browser (webui.py)
    max_tokens: int | None = None  # what a request that sets no limit may generate (serve -n); None: the context


# each endpoint that generates: how its body is read, how its answer is written, the field that holds the prompt
ENDPOINTS = {"chat": (lambda body, state: parse(body, state, True), Answer, "messages"),
             "text": (lambda body, state: parse(body, state, False), Answer, "prompt"),
             "infill": (llama_api.parse, llama_api.InfillAnswer, "input_prefix"),
             "completion": (llama_api.parse_native, llama_api.InfillAnswer, "prompt"),
             "responses": (responses_api.parse, responses_api.ResponsesAnswer, "input"),
             "messages": (anthropic_api.parse, anthropic_api.MessageAnswer, "messages"),
             "ollama_chat": (ollama_api.parse_chat, ollama_api.OllamaAnswer, "messages"),
             "ollama_generate": (ollama_api.parse_generate, ollama_api.OllamaAnswer, "prompt")}


# the app ------------------------------------------------------------------------------------------------------------
def create_app(state: ServerState) -> Starlette:
    def refuse(request: HttpRequest) -> Response | None:
        """The error that answers a request for the model instead: no key, or the model still loading."""
        if (denied := _auth(request)) is not None:
            return denied
        if state.engine is None:
            return error("the model is still loading", 503, code="model_loading")
        return None

    async def read(request: HttpRequest) -> tuple[object, Response | None]:
        """A request's JSON body, or the error that answers it instead (refuse(), or fields.json_body's)."""
        if (refused := refuse(request)) is not None:
            return None, refused
        if hasattr(request.state, "body"):  # (read before: Ollama's handler looks first)
            return request.state.body, None
        try:
            request.state.body = await fields.json_body(request)
        except BadRequest as e:
            return None, error(str(e), e.status, e.param, e.code)
        return request.state.body, None

    async def completions(request: HttpRequest, endpoint: str) -> Response:
        body, refused = await read(request)
        if refused is not None:
            return refused
        events: asyncio.Queue[Event] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        read_body, render, prompt_field = ENDPOINTS[endpoint]

        def admit():  # tokenizing a long prompt, compiling a grammar: work kept off the event loop
            req, how = read_body(body, state)
            reqs, handles = choices.copies(req, how.get("n", 1)), []
            for i, r in enumerate(reqs):
                r.on_event = lambda ev, i=i: loop.call_soon_threadsafe(events.put_nowait, (i, ev))
            try:
                for r in reqs:
                    handles.append(state.engine.submit(r))
            except BaseException:
                for h in handles:
                    h.cancel()
                raise
            return reqs, how, handles

        try:
            reqs, how, handles = await asyncio.to_thread(admit)
        except BadRequest as e:
            return error(str(e), e.status, e.param, e.code)
        except ContextOverflowError as e:
            return error(f"{e}; shorten the prompt or start the server with a larger --ctx-size", 400, prompt_field,
                         "context_length_exceeded")
        except QueueFull as e:
            return error(f"{e}; try again later", 503, code="server_busy")
        except EdgespecError as e:
            return error(str(e), 400)
        group = choices.Group([render(state, r, how) for r in reqs], handles)
        if how["stream"]:
            return StreamingResponse(_stream(request, group, events), media_type=group.answers[0].MEDIA,
                                     headers={"Cache-Control": "no-cache"})
        finished = False
        try:
            while not group.done:
                try:
                    i, ev = await asyncio.wait_for(events.get(), timeout=0.5)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        return Response(status_code=499)  # nobody to answer: the finally frees the sequences
                    continue
                group.add(i, ev)
            finished, last = True, group.final
            request.state.generated = generation(len(reqs[0].prompt), last.stats) + group.note()
            if last.error:
                return error(f"generation failed: {last.error}", 500)
            return JSONResponse(group.body())
        finally:
            if not finished:
                group.cancel()

    async def _stream(request, group: choices.Group, events: asyncio.Queue):
        try:
            for frame in group.opening():
                yield frame
            while not group.done:
                i, ev = await events.get()
                group.add(i, ev)
                for frame in group.frames(i, ev):
                    yield frame
            last = group.final
            request.state.generated = f"generation failed: {last.error}" if last.error else \
                generation(len(group.answers[0].req.prompt), last.stats) + group.note()
        finally:
            if not group.done:  # the client went away mid-stream: free its sequences at the next step
                group.cancel()
                request.state.generated = f"the client left the stream after {group.n_out()} tokens"

    def _auth(request: HttpRequest) -> Response | None:
        if state.api_key and request.headers.get("authorization") != f"Bearer {state.api_key}" \
                and request.headers.get("x-api-key") != state.api_key:  # (Anthropic's clients send the latter)
            return error("invalid or missing API key (send Authorization: Bearer KEY, or x-api-key: KEY)", 401,
                         code="invalid_api_key")
        return None

    def generating(endpoint: str, shaped=lambda response: response):
        """The handler of a route that generates (ENDPOINTS[endpoint]); `shaped`: its errors in its API's shape."""
        async def handler(request):
            return shaped(await completions(request, endpoint))
        return handler

    async def count_tokens(request):
        return anthropic_errors(await vocabulary(request, anthropic_api.count_tokens, state))

    def ollama_generation(api: str):  # Ollama's /api/chat, /api/generate
        async def handler(request):
            body, refused = await read(request)
            if refused is None and ollama_api.loaded(body, api):  # a client warming the model up: it is loaded
                return JSONResponse(ollama_api.load_answer(state, api))
            return ollama_errors(refused or await completions(request, f"ollama_{api}"))
        return handler

    async def ollama_listing(request):  # GET /api/tags, /api/ps; POST /api/show
        if (refused := refuse(request)) is not None:
            return ollama_errors(refused)
        if request.url.path == "/api/show":
            body, refused = await read(request)
            if refused is not None:
                return ollama_errors(refused)
            try:
                return JSONResponse(await asyncio.to_thread(ollama_api.show, body, state))
            except BadRequest as e:
                return JSONResponse({"error": str(e)}, e.status)
        return JSONResponse((ollama_api.tags if request.url.path == "/api/tags" else ollama_api.running)(state))

    async def ollama_version(request):
        return JSONResponse({"version": ollama_api.VERSION})

    async def root(request):  # what Ollama's clients check first; a browser gets the chat page (webui.py)
        if state.webui and webui.wants_page(request):
            return webui.page()
        return PlainTextResponse("edgespec is running: OpenAI's API at /v1, Anthropic's at /v1/messages, Ollama's at "
                                 "/api\n")

    async def stored_response(request):  # GET or DELETE /v1/responses/{id}
        if (refused := refuse(request)) is not None:
            return refused
        id = request.path_params["id"]
        kept = state.responses.get(id)
        if kept is None:
            return error(f"no stored response {id!r}", 404, "response_id", "not_found")
        if request.method == "DELETE":
            state.responses.delete(id)
            return JSONResponse({"id": id, "object": "response", "deleted": True})
        return JSONResponse(kept[0])

    async def vocabulary(request, answer, of=None):  # llama-server's /tokenize, /detokenize; count_tokens
        body, refused = await read(request)
        if refused is not None:
            return refused
        try:
            return JSONResponse(await asyncio.to_thread(answer, body, of or state.engine.model))
        except BadRequest as e:
            return error(str(e), e.status, e.param, e.code)

    async def tokenize(request):
        return await vocabulary(request, llama_api.tokenize)

    async def detokenize(request):
        return await vocabulary(request, llama_api.detokenize)

    async def props(request):
        return refuse(request) or JSONResponse(llama_api.props(state))

    def _model() -> dict:
        return {"id": state.model_id, "object": "model", "created": state.created, "owned_by": "edgespec"}

    async def models(request):
        if (denied := _auth(request)) is not None:
            return denied
        return JSONResponse({"object": "list", "data": [_model()]})

    async def model(request):  # the client's models.retrieve(id)
        if (denied := _auth(request)) is not None:
            return denied
        name = request.path_params["model"]
        if name != state.model_id:
            return error(f"no model {name!r}; this server serves {state.model_id!r}", 404, "model",
                         "model_not_found")
        return JSONResponse(_model())

    async def health(request):
        if state.load_error:
            return JSONResponse({"status": "error", "error": state.load_error}, 503)
        if state.engine is None:
            return JSONResponse({"status": "loading"}, 503)
        return JSONResponse({"status": "ok"})

    async def metrics(request):
        return PlainTextResponse(prometheus.text(state.engine), media_type="text/plain; version=0.0.4")

    routes = [Route("/v1/chat/completions", generating("chat"), methods=["POST"]),
              Route("/v1/completions", generating("text"), methods=["POST"]),
              # (llama-server's paths without /v1 too: a client given the server's root as its base URL finds them)
              Route("/chat/completions", generating("chat"), methods=["POST"]),
              Route("/completions", generating("text"), methods=["POST"]), Route("/models", models, methods=["GET"]),
              Route("/completion", generating("completion"), methods=["POST"]),
              Route("/v1/responses", generating("responses"), methods=["POST"]),
              Route("/v1/messages", generating("messages", anthropic_errors), methods=["POST"]),
              Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
              Route("/v1/responses/{id}", stored_response, methods=["GET", "DELETE"]),
              Route("/infill", generating("infill"), methods=["POST"]), Route("/tokenize", tokenize, methods=["POST"]),
              Route("/detokenize", detokenize, methods=["POST"]), Route("/props", props, methods=["GET"]),
              Route("/v1/models", models, methods=["GET"]), Route("/v1/models/{model:path}", model, methods=["GET"]),
              Route("/api/chat", ollama_generation("chat"), methods=["POST"]),
              Route("/api/generate", ollama_generation("generate"), methods=["POST"]),
              Route("/api/tags", ollama_listing, methods=["GET"]), Route("/api/ps", ollama_listing, methods=["GET"]),
              Route("/api/show", ollama_listing, methods=["POST"]),
              Route("/api/version", ollama_version, methods=["GET"]), Route("/", root, methods=["GET"]),
              Route("/health", health, methods=["GET"]),
              Route("/metrics", metrics, methods=["GET"])]
    if state.webui:
        routes += [Route(f"/{name}", lambda request, name=name: webui.page(name), methods=["GET"])
                   for name in ("chat.js", "markdown.js")]
    # Browsers ask before a page calls another origin; answered only for the origins given (--allow-origin), so a web
    # page a user visits cannot drive the model on localhost unless they said so.
    middleware = [Middleware(CORSMiddleware, allow_origins=list(state.origins), allow_methods=["GET", "POST", "DELETE"],
                             allow_headers=["*"], max_age=600)] if state.origins else []
    if state.log is not None:
        middleware.insert(0, Middleware(RequestLog, write=state.log))
    return Starlette(routes=routes, middleware=middleware,
                     exception_handlers={404: _not_found, 405: _not_allowed, 500: _server_error})


def reshaped(error_body):
    """An answer whose error comes in another API's shape: error_body(OpenAI-style body, status) -> its body."""
    def answer(response: Response) -> Response:
        if response.status_code < 400 or not isinstance(response, JSONResponse):
            return response
        return JSONResponse(error_body(json.loads(response.body), response.status_code), response.status_code)
    return answer


anthropic_errors = reshaped(anthropic_api.error_body)
ollama_errors = reshaped(lambda body, status: {"error": body["error"]["message"]})  # Ollama's: {"error": "..."}


async def _not_found(request, exc):
    served = ", ".join(f"{'/'.join(sorted(r.methods - {'HEAD'}))} {re.sub(r':[a-z]+}', '}', r.path)}"
                       for r in request.app.routes)  # (a path parameter as {model}, not {model:path})
    if request.url.path.startswith("/api/"):  # Ollama's pull, create, delete, embed...
        return JSONResponse({"error": f"edgespec does not serve {request.url.path}: it serves the model it was "
                                      f"started with (Ollama's /api/chat, /api/generate, /api/tags, /api/show, "
                                      f"/api/ps, /api/version)"}, 404)
    return error(f"no route {request.url.path}; edgespec serves {served}", 404, code="not_found")


async def _not_allowed(request, exc):
    return error(f"{request.method} is not allowed on {request.url.path}", 405, code="method_not_allowed")


async def _server_error(request, exc):
    return error(f"internal error: {type(exc).__name__}: {exc}", 500)


def _warm_grammar_vocab(engine: BatchEngine) -> None:
    try:
        engine.model.constraint_tokenizer()
    except EdgespecError:  # the server stopped (and closed the model) first
        pass


def serve(state: ServerState, load, host: str, port: int, on_ready=None) -> None:
    """Start listening at once (GET /health says 503 while `load()` builds the engine), then serve until SIGINT or
    SIGTERM: every running request gets its final chunk, and this returns. on_ready(engine, port) once loaded."""
    import uvicorn

    from .exits import ignored as started_ignoring

    ignored = {s for s in (signal.SIGINT, signal.SIGTERM) if started_ignoring(s)}  # uvicorn would catch them again

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            if sig in ignored:
                return
            if state.engine is not None:
                state.engine.stop("length")  # in-flight streams end with a final chunk
            if self.should_exit and sig == 2:
                self.force_exit = True
            self.should_exit = True  # not recorded as captured: a clean stop is exit 0

    sock = listen(host, port)
    port = sock.getsockname()[1]  # (--port 0: the one the system chose)
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
        # the grammar engine's view of the vocabulary, built now rather than on the first constrained request
        threading.Thread(target=_warm_grammar_vocab, args=(engine,), name="edgespec-grammar-vocab", daemon=True).start()
        t = threading.Thread(target=engine.run, name="edgespec-scheduler", daemon=True)
        t.start()
        scheduler.append(t)
        if on_ready:
            on_ready(engine, port)
        if server.should_exit:
            engine.stop("length")

    threading.Thread(target=loader, name="edgespec-loader", daemon=True).start()
    server.run(sockets=[sock])
    if state.engine is not None:
        state.engine.stop("length")
        for t in scheduler:
            t.join(timeout=30)
        state.engine.close()
    if state.load_error:
        raise EdgespecError(state.load_error)
