"""The request fields every endpoint shares, each checked before anything is queued (a bad one is a BadRequest
naming it, which the server answers with a 4xx): the JSON body itself, numbers in their range, stop strings,
logit_bias, ignore_eos, and the response formats and grammars that constrain the output."""
from __future__ import annotations

import asyncio
import json
import math

from .constraints import Constraint
from .errors import InvalidArgument


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, code: str | None = None, status: int = 400):
        super().__init__(message)
        self.param, self.code, self.status = param, code, status


# The most a request's body may hold: 16 MiB is some 4 million tokens of text, 30 times the longest context a GGUF
# model has. A bigger one is refused before it is read whole (its tokens could never fit; counting them took the
# server's CPU a minute for 60 MB).
MAX_BODY = 16 << 20


async def json_body(request) -> object:
    """A Starlette request's body as JSON: refused (413) past MAX_BODY, said by its Content-Length or found as it
    arrives, and (400) where it is not JSON or nests too deeply to read."""
    length = request.headers.get("content-length", "")
    too_big = BadRequest(f"the request body is over {MAX_BODY >> 20} MiB, more text than any context holds",
                         code="request_too_large", status=413)
    if length.isdigit() and int(length) > MAX_BODY:
        raise too_big
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > MAX_BODY:
            raise too_big
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        return json.loads(raw) if n < 1 << 20 else await asyncio.to_thread(json.loads, raw)  # (off the event loop)
    except RecursionError:
        raise BadRequest("the request body is JSON nested too deeply to read") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"the request body is not valid JSON: {e}") from None


def number(body: dict, name: str, default, lo: float, hi: float, integer: bool = False):
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise BadRequest(f"'{name}' must be {'an integer' if integer else 'a number'}, got {json.dumps(value)}", name)
    if not math.isfinite(value) or not lo <= value <= hi:
        raise BadRequest(f"'{name}' must be between {lo} and {hi}, got {value}", name)
    return value


def stop(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return [s for s in stop if s]
    raise BadRequest("'stop' must be a string or a list of strings", "stop")


def logit_bias(body: dict, n_vocab: int) -> tuple[tuple[int, float], ...]:
    bias = body.get("logit_bias")
    if bias is None:
        return ()
    if not isinstance(bias, dict):
        raise BadRequest("'logit_bias' must map token ids to numbers between -100 and 100", "logit_bias")
    out = []
    for key, value in bias.items():
        try:
            token = int(key)
        except ValueError:
            raise BadRequest(f"logit_bias: {key!r} is not a token id", "logit_bias") from None
        if not 0 <= token < n_vocab:
            raise BadRequest(f"logit_bias: token {token} is not in this model's vocabulary", "logit_bias")
        out.append((token, number({"logit_bias": value}, "logit_bias", 0, -100, 100)))
    return tuple(out)


def ignore_eos(body: dict, model) -> tuple[tuple[int, float], ...]:
    """llama-server's `ignore_eos`: no end-of-generation token is ever chosen (benchmarks: every answer max_tokens)."""
    flag = body.get("ignore_eos", False)
    if not isinstance(flag, bool):
        raise BadRequest("'ignore_eos' must be true or false", "ignore_eos")
    return tuple((t, -math.inf) for t in model.eog_ids) if flag else ()


def constraint(body: dict) -> Constraint | None:
    """response_format (json_object, json_schema), or llama-server's `grammar` (GBNF) and `json_schema` fields."""
    fmt = body.get("response_format")
    try:
        if fmt is not None:
            if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
                raise BadRequest("'response_format' must be {\"type\": \"text\" | \"json_object\" | \"json_schema\"}",
                                 "response_format")
            if fmt["type"] == "json_object":
                return Constraint.json_object()
            if fmt["type"] == "json_schema":
                spec = fmt.get("json_schema")
                schema = spec.get("schema") if isinstance(spec, dict) else None
                if not isinstance(schema, dict):
                    raise BadRequest("response_format.json_schema.schema must be a JSON schema object",
                                     "response_format")
                return checked(Constraint.json_schema(schema))
        if isinstance(body.get("json_schema"), dict):
            return checked(Constraint.json_schema(body["json_schema"]))
        if body.get("grammar") is not None:
            if not isinstance(body["grammar"], str):
                raise BadRequest("'grammar' must be a GBNF grammar (a string)", "grammar")
            return checked(Constraint.gbnf(body["grammar"]))
    except InvalidArgument as e:
        raise BadRequest(str(e), "response_format" if fmt is not None else "grammar") from None
    return None


def checked(constraint: Constraint) -> Constraint:
    constraint.grammar()  # one that does not parse: a 400 naming the field, before the request queues
    return constraint
