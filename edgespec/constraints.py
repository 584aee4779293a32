"""Constrained output: a GBNF grammar (llama.cpp's format), a JSON schema, or any JSON object, as masks over the
vocabulary that follow the text token by token.

The engine is llguidance, chosen for what speculation needs: a mask for the state after each drafted token (push a
token, read the mask, and roll back by n when the draft is rejected: `rollback(n)`), the tokens a grammar forces
(`compute_ff_tokens`: free drafts), how many tokens of a proposal it allows (`validate_tokens`: a lookup proposal
cut where the grammar says no), and a tokenizer built from the llama.cpp vocabulary itself. llama.cpp's own grammar
sampler can only be cloned whole (one copy per draft position each round) and has no forced tokens; it also aborts
the process on some dead ends ("empty grammar stack"). llguidance never raises on a token: a bad one puts the
matcher in an error state, so a Grammar never feeds it a token its mask forbids.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

import numpy as np

from .errors import InvalidArgument

KINDS = ("gbnf", "lark", "json_schema", "json", "regex")
# JSON is written on one line, Python's json.dumps style: no free whitespace for a small model to loop in, and the
# punctuation and keys between values are forced (free drafts). A schema's own "x-guidance" options override it.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


@dataclass(frozen=True)
class Constraint:
    """What the output must match. kind: gbnf (llama.cpp's grammar format), lark (llguidance's), json_schema (the
    schema as JSON text), json (any JSON object), regex."""

    kind: str
    text: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidArgument(f"unknown constraint kind {self.kind!r}; one of {', '.join(KINDS)}")
        if not isinstance(self.text, str):
            raise InvalidArgument("a constraint's text must be a string")

    @classmethod
    def json_schema(cls, schema: dict | str) -> "Constraint":
        return cls("json_schema", schema if isinstance(schema, str) else json.dumps(schema))

    @classmethod
    def json_object(cls) -> "Constraint":
        return cls("json")

    @classmethod
    def gbnf(cls, text: str) -> "Constraint":
        return cls("gbnf", text)

    def grammar(self) -> str:
        """llguidance's grammar for this constraint, compiled once to check it (not yet against a vocabulary)."""
        from llguidance import LLMatcher

        grammar = self.source()
        error = LLMatcher.validate_grammar(grammar)
        if error and not error.startswith("WARNING"):
            raise InvalidArgument(f"invalid {self._name}: {_first_line(error)}")
        return grammar

    def source(self) -> str:
        """llguidance's grammar text for this constraint, unchecked (a JSON schema's own errors raise here)."""
        from llguidance import LLMatcher, grammar_from

        try:
            if self.kind == "json":
                return LLMatcher.grammar_from_json_schema({"type": "object"}, defaults=JSON_STYLE)
            if self.kind == "json_schema":
                try:
                    schema = json.loads(self.text)
                except json.JSONDecodeError as e:
                    raise InvalidArgument(f"the JSON schema is not valid JSON: {e}") from None
                if not isinstance(schema, dict):
                    raise InvalidArgument("a JSON schema must be a JSON object")
                return LLMatcher.grammar_from_json_schema(schema, defaults=JSON_STYLE)
            if self.kind == "regex":
                return LLMatcher.grammar_from_regex(self.text)
            return grammar_from(self.kind, self.text)
        except ValueError as e:
            raise InvalidArgument(f"invalid {self._name}: {_first_line(e)}") from None

    @property
    def _name(self) -> str:
        return {"gbnf": "grammar", "lark": "grammar", "json_schema": "JSON schema", "json": "JSON constraint",
                "regex": "regular expression"}[self.kind]


class Grammar:
    """One generation's matcher: the mask of allowed next tokens, tokens pushed (a draft tried, or accepted text) and
    popped, the tokens the grammar forces, how much of a proposal it allows."""

    def __init__(self, constraint: Constraint, tokenizer, n_vocab: int) -> None:
        from llguidance import LLMatcher

        grammar = constraint.source()  # checked here against the vocabulary, so not compiled twice
        error = LLMatcher.validate_grammar(grammar, tokenizer)
        if error and not error.startswith("WARNING"):
            raise InvalidArgument(f"invalid {constraint._name}: {_first_line(error)}")
        self._m = LLMatcher(tokenizer, grammar, log_level=0)
        if self._m.is_error():
            raise InvalidArgument(f"invalid {constraint._name}: {_first_line(self._m.get_error())}")
        self.n_vocab = n_vocab
        self._mask: np.ndarray | None = None
        self.seconds = 0.0  # time in the matcher and its masks since it was built (what the constraint costs)

    def mask(self) -> np.ndarray:
        """Allowed next tokens (bool, one per token id)."""
        if self._mask is None:
            t0 = time.perf_counter()
            bits = np.frombuffer(self._m.compute_bitmask(), dtype=np.uint8)
            mask = np.unpackbits(bits, bitorder="little")[:self.n_vocab].astype(bool)
            if len(mask) < self.n_vocab:
                mask = np.concatenate([mask, np.zeros(self.n_vocab - len(mask), dtype=bool)])
            self._mask = mask
            self.seconds += time.perf_counter() - t0
        return self._mask

    def allows(self, token: int) -> bool:
        return 0 <= token < self.n_vocab and bool(self.mask()[token])

    def push(self, token: int) -> None:
        if not self.allows(token):  # the matcher would enter an error state it never leaves
            raise AssertionError(f"token {token} is not allowed by the grammar here")
        t0 = time.perf_counter()
        self._m.consume_token(token)
        self._mask = None
        self.seconds += time.perf_counter() - t0

    def pop(self, n: int) -> None:
        if n > 0:
            t0 = time.perf_counter()
            if not self._m.rollback(n):
                raise AssertionError(f"the grammar could not roll back {n} tokens: {self._m.get_error()}")
            self._mask = None
            self.seconds += time.perf_counter() - t0

    def forced(self) -> list[int]:
        """Tokens that spell the only text the grammar allows next (may be none)."""
        t0 = time.perf_counter()
        out = [] if self._m.is_stopped() else list(self._m.compute_ff_tokens())
        self.seconds += time.perf_counter() - t0
        return out

    def allowed_prefix(self, tokens: list[int]) -> int:
        """How many of these tokens, in order, the grammar allows from here."""
        t0 = time.perf_counter()
        n = self._m.validate_tokens(tokens) if tokens else 0
        self.seconds += time.perf_counter() - t0
        return n

    @property
    def finished(self) -> bool:
        """The grammar is complete: only an end-of-generation token may follow."""
        return self._m.is_stopped()


def _first_line(e) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else "rejected"
