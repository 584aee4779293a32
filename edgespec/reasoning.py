"""A thinking model's reasoning apart from its answer: the text between `<think>` and `</think>` at the start of a
reply (Qwen3, QwQ, DeepSeek-R1 and their distillations write it so), read as it comes, for the APIs that show it in
a field of its own (`reasoning_content`, a Responses reasoning item, an Anthropic thinking block) as llama-server's
default `reasoning_format` does. Only models whose vocabulary has both tags as tokens of their own are read so: in
any other model's reply, `<think>` is text like any."""
from __future__ import annotations

from .tools import partial_tag

OPEN, CLOSE = "<think>", "</think>"


def markers(model) -> tuple[int, int] | None:
    """The token ids of <think> and </think> where this vocabulary has each as one token (a thinking model)."""
    ids = [model.tokenize(tag, add_special=False, parse_special=True) for tag in (OPEN, CLOSE)]
    return (ids[0][0], ids[1][0]) if all(len(i) == 1 for i in ids) else None


def opened(prompt: list[int], ids: tuple[int, int]) -> bool:
    """Whether the prompt leaves a <think> open (templates that start the reply inside its reasoning)."""
    for token in reversed(prompt):
        if token in ids:
            return token == ids[0]
    return False


class Thoughts:
    """A reply split as it comes into its reasoning and the rest. The reasoning is what stands between a <think>
    that opens the reply (or the prompt) and the </think> after it, the blanks around it left out; everything from
    there on, a later <think> included, is the answer, its leading blanks left out."""

    def __init__(self, inside: bool = False) -> None:
        self.state = "inside" if inside else "start"  # start: a <think> may still open it; then inside, then done
        self.held = ""  # text not yet known to be reasoning or answer (a tag's beginning, blanks)
        self.fresh = True  # no character of the part being read has been shown yet

    def feed(self, text: str, end: bool = False) -> tuple[str, str]:
        """More of the reply -> (reasoning, answer) to show now; `end`: nothing more comes, show all."""
        self.held += text
        thought = answer = ""
        if self.state == "start":
            head = self.held.lstrip()
            if head.startswith(OPEN):
                self.held, self.state = head[len(OPEN):], "inside"
            elif OPEN.startswith(head) and not end:
                return "", ""  # blanks, or the beginning of a <think>: not known yet
            else:
                self.state, self.fresh = "done", False  # no reasoning: the reply is the answer as written
        if self.state == "inside":
            i = self.held.find(CLOSE)
            if i >= 0:
                thought = self._shown(self.held[:i].rstrip())
                self.held, self.state, self.fresh = self.held[i + len(CLOSE):], "done", True
            else:
                cut = len(self.held) if end else len(self.held) - partial_tag(self.held, CLOSE)
                keep = cut if end else len(self.held[:cut].rstrip())  # blanks wait: a </think> may follow
                thought, self.held = self._shown(self.held[:keep]), self.held[keep:]
                return thought, ""
        answer, self.held = self._shown(self.held), ""
        return thought, answer

    def _shown(self, text: str) -> str:
        if self.fresh:
            text = text.lstrip()
            self.fresh = not text
        return text


def split(text: str, inside: bool = False) -> tuple[str, str]:
    """A whole reply -> (reasoning, answer)."""
    return Thoughts(inside).feed(text, end=True)
