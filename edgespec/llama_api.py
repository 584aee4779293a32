"""llama-server's own endpoints that editors and chat UIs call beside the OpenAI API. `/infill`, which completion
plugins made for llama-server call (llama.vscode, llama.vim): its fields to a Request (fim.infill builds the prompt;
the rest of the body is read as `/v1/completions` reads it), and its answer, whole or streamed, in llama-server's
shape (`content`, `stop`, `stop_type`, `tokens_predicted`, `timings`, and only the `response_fields` asked for); its
`t_max_predict_ms` and `n_indent` honoured as llama-server honours them (Request.time_limit_s, min_indent),
`t_max_prompt_ms` and its own sampler chain (`samplers`) not (unknown fields are ignored, as /v1/completions ignores
them). `/completion`, llama-server's own completion endpoint, the same for a `prompt` as /v1/completions reads it.
`/tokenize` and `/detokenize`, which UIs use to count a conversation's tokens against the context, and
`/props`, where they read the context size and the chat template."""
from __future__ import annotations

from . import fim
from .errors import ContextOverflowError, EdgespecError
from .openai_api import Answer, BadRequest, parse as parse_completion, prompt_progress, timings
from .sequences import Request

OWN = ("input_prefix", "input_suffix", "input_extra", "prompt", "n_predict", "response_fields", "t_max_predict_ms",
       "n_indent")
OPENAI_ONLY = ("suffix", "echo", "logprobs", "best_of", "n", "max_tokens", "max_completion_tokens")


def parse(body, state) -> tuple[Request, dict]:
    """An /infill body -> the engine's Request and how to render the answer (openai_api.parse's, plus what the
    answer needs of the prompt: its length and whether it was cut to fit the context)."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    texts = {}
    for name in ("input_prefix", "input_suffix", "prompt"):
        texts[name] = "" if body.get(name) is None else body[name]
        if not isinstance(texts[name], str):
            raise BadRequest(f"'{name}' must be a string", name)
    extra = body.get("input_extra") or []
    if not isinstance(extra, list) or not all(isinstance(c, dict) and isinstance(c.get("text", ""), str)
                                              and isinstance(c.get("filename", ""), str) for c in extra):
        raise BadRequest("'input_extra' must be a list of {\"filename\": string, \"text\": string}", "input_extra")
    n_predict = _n_predict(body)
    engine = state.engine
    n_ctx = engine.target.n_ctx
    answer_room = n_predict if 0 <= n_predict < n_ctx else n_ctx // 4  # kept free for the answer
    try:
        tokens, cut = fim.infill(engine.model, texts["input_prefix"], texts["input_suffix"], texts["prompt"],
                                 [(c.get("filename", ""), c.get("text", "")) for c in extra], n_ctx - answer_room)
    except ContextOverflowError:
        raise  # (the server's context_length_exceeded)
    except EdgespecError as e:
        raise BadRequest(str(e), "input_suffix", "unsupported_value") from None
    return _request(body, state, tokens, cut, n_predict)


def parse_native(body, state) -> tuple[Request, dict]:
    """A /completion body (llama-server's own completion endpoint, which its README's examples call): `prompt` as
    /v1/completions reads it (a text, control-token names parsed, or token ids), `n_predict`, the sampling fields;
    the answer in llama-server's shape, as /infill's."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if "prompt" not in body:
        raise BadRequest("'prompt' is required: a string or a list of token ids", "prompt")
    return _request(body, state, body["prompt"], False, _n_predict(body))


def _n_predict(body: dict) -> int:
    n_predict = body.get("n_predict", -1)
    if isinstance(n_predict, bool) or not isinstance(n_predict, int) or n_predict < -1:
        raise BadRequest("'n_predict' must be an integer >= -1 (-1: until the model ends the text)", "n_predict")
    return n_predict


def _request(body: dict, state, prompt, cut: bool, n_predict: int) -> tuple[Request, dict]:
    """The Request for a prompt of llama-server's endpoints, with their own fields (n_predict as _n_predict read it,
    t_max_predict_ms, n_indent, response_fields, logit_bias as pairs) and the rest read as /v1/completions reads
    them."""
    limit_ms = body.get("t_max_predict_ms", 0)
    if isinstance(limit_ms, bool) or not isinstance(limit_ms, (int, float)) or not 0 <= limit_ms < float("inf"):
        raise BadRequest("'t_max_predict_ms' must be a number of milliseconds >= 0 (0: no limit)", "t_max_predict_ms")
    n_indent = body.get("n_indent", 0)
    if isinstance(n_indent, bool) or not isinstance(n_indent, int) or n_indent < 0:
        raise BadRequest("'n_indent' must be an integer >= 0 (0: no rule)", "n_indent")
    fields = body.get("response_fields")
    if fields is not None and (not isinstance(fields, list) or not all(isinstance(f, str) for f in fields)):
        raise BadRequest("'response_fields' must be a list of strings", "response_fields")
    rest = {k: v for k, v in body.items() if k not in OWN and k not in OPENAI_ONLY}
    if isinstance(rest.get("logit_bias"), list):
        rest["logit_bias"] = _bias_pairs(rest["logit_bias"])
    req, how = parse_completion({**rest, "prompt": prompt}, state, False)
    n_ctx = state.engine.target.n_ctx
    req.max_tokens = n_predict if n_predict >= 0 else state.max_tokens if state.max_tokens is not None else \
        max(0, n_ctx - len(req.prompt))  # (-1: the server's -n, else until the context is full)
    req.time_limit_s, req.min_indent = (limit_ms / 1000 if limit_ms else None), n_indent
    return req, {**how, "truncated": cut, "fields": fields}


def _bias_pairs(pairs: list) -> dict:
    """llama-server's list form of logit_bias, [[token id, bias or false (never)], ...], as OpenAI's map."""
    if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], int) and not isinstance(p[0], bool)
               and (p[1] is False or isinstance(p[1], (int, float)) and not isinstance(p[1], bool)) for p in pairs):
        raise BadRequest("'logit_bias' must be [[token id, bias or false], ...] or a map of token ids to biases",
                         "logit_bias")
    return {str(token): -100 if value is False else value for token, value in pairs}


def _stop_type(finish: str | None, word: str | None) -> str:
    return "word" if word else "eos" if finish in ("stop", "grammar") else "limit" if finish else "none"


def _select(out: dict, fields: list[str] | None) -> dict:
    """llama-server's response_fields: only those, each under its path ("timings/prompt_n") as the key."""
    if fields is None:
        return out
    picked = {}
    for path in fields:
        value, found = out, True
        for part in path.split("/"):
            if isinstance(value, dict) and part in value:
                value = value[part]
            else:
                found = False
                break
        if found:
            picked[path] = value
    return picked


class InfillAnswer(Answer):
    """The events of one /infill request, rendered as llama-server renders them."""

    def _progress(self) -> dict:
        return {"index": 0, "tokens": [], "tokens_predicted": self.n_out, "tokens_evaluated": len(self.req.prompt)}

    def _final(self, last) -> dict:
        text = "".join(self.text)
        return {**self._progress(), "content": text, "stop": True, "model": self.state.model_id,
                "has_new_line": "\n" in text, "truncated": self.how["truncated"],
                "stop_type": _stop_type(last.finish_reason, last.stop_word), "stopping_word": last.stop_word or "",
                "tokens_cached": len(self.req.prompt) + self.n_out, "timings": timings(last.stats)}

    def body(self, last) -> dict:
        return _select(self._final(last), self.how["fields"])

    def tail(self, stats=None):
        return ()  # (llama-server's own stream ends with its stop chunk, no [DONE])

    def progress(self, ev) -> dict:
        return {**_select({**self._progress(), "content": "", "stop": False}, self.how["fields"]),
                "prompt_progress": prompt_progress(ev)}

    def chunk(self, ev, first: bool = False, last=None) -> dict | None:
        if first:
            return None  # (llama-server's stream starts with the first token)
        if last is not None:  # the end: the text came in the chunks before
            return _select({**self._final(last), "content": ""}, self.how["fields"])
        return _select({**self._progress(), "content": ev.text if ev is not None else "", "stop": False},
                       self.how["fields"])


def tokenize(body, model) -> dict:
    """llama-server's /tokenize: {"content", "add_special" (false), "parse_special" (true, as a /completion prompt
    is read), "with_pieces" (false)} -> {"tokens": ids, or {"id", "piece"} objects, a piece as text or, where its
    bytes are not UTF-8 on their own, as a list of bytes}."""
    if not isinstance(body, dict) or not isinstance(body.get("content"), str):
        raise BadRequest("'content' must be a string: the text to tokenize", "content")
    flags = {}
    for name, default in (("add_special", False), ("parse_special", True), ("with_pieces", False)):
        flags[name] = body.get(name, default)
        if not isinstance(flags[name], bool):
            raise BadRequest(f"'{name}' must be true or false", name)
    try:
        ids = model.tokenize(body["content"], add_special=flags["add_special"], parse_special=flags["parse_special"])
    except EdgespecError as e:
        raise BadRequest(str(e), "content") from None
    if not flags["with_pieces"]:
        return {"tokens": ids}
    return {"tokens": [{"id": t, "piece": _piece(_text_of(model, t))} for t in ids]}


def detokenize(body, model) -> dict:
    """llama-server's /detokenize: {"tokens": ids} -> {"content": their text, control tokens as their names}."""
    tokens = body.get("tokens") if isinstance(body, dict) else None
    if not isinstance(tokens, list):
        raise BadRequest("'tokens' must be a list of token ids", "tokens")
    try:
        model.check_tokens(tokens)
    except EdgespecError as e:
        raise BadRequest(str(e), "tokens") from None
    return {"content": b"".join(_text_of(model, t) for t in tokens).decode("utf-8", "replace")}


def _text_of(model, token: int) -> bytes:
    """A token's bytes, a control token's as its name ("<|im_end|>"), as llama-server renders them."""
    return model.token_text(token) if token in model.control_ids else model.piece(token)


def _piece(raw: bytes):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


def props(state) -> dict:
    """llama-server's GET /props, which UIs read for the context size and the chat template: the served model, each
    sequence's context, the sequences served at once, and the sampling a request that names none gets."""
    import llama_cpp

    from . import __version__

    engine, d = state.engine, state.defaults
    model = engine.model
    return {"model_path": model.path, "model_alias": state.model_id, "total_slots": engine.parallel,
            "default_generation_settings": {"n_ctx": engine.target.n_ctx, "params": {
                "temperature": d.temperature, "top_k": d.top_k, "top_p": d.top_p, "min_p": d.min_p,
                "repeat_penalty": d.repeat_penalty, "repeat_last_n": d.repeat_last_n,
                "presence_penalty": d.presence_penalty, "frequency_penalty": d.frequency_penalty, "n_predict": -1}},
            "chat_template": model.chat_template() or "",
            "bos_token": _name(model, model.bos), "eos_token": _name(model, model.eos),
            "build_info": f"edgespec {__version__}, llama-cpp-python {llama_cpp.__version__}",
            "modalities": {"vision": False, "audio": False}}


def _name(model, token: int) -> str:
    return model.token_text(token).decode("utf-8", "replace") if 0 <= token < model.n_vocab else ""
