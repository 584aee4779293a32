"""`edgespec chat`: the interactive loop. It renders; the engine decodes, the Conversation remembers.

Each turn re-renders the whole conversation in the chat template and hands it to the engine, which keeps both KV
caches between turns and decodes only what is new after the longest common prefix. When the conversation no longer
fits, the oldest exchanges are dropped (the system prompt stays) and the rest is prefilled again.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections import Counter
from pathlib import Path

import click

from . import reasoning
from .chat import Conversation
from .errors import EdgespecError, InvalidArgument, Terminated
from .progress import PromptProgress
from .stats import PHASES

HELP = """commands:
  /stats         this turn and the whole session: speed, acceptance, who drafted, time split
  /reset         forget the conversation (the system prompt stays)
  /system TEXT   set the system prompt (no TEXT: remove it)
  /set NAME VAL  a setting for the replies from now on: temperature, top_k, top_p, min_p, seed, repeat_penalty,
                 repeat_last_n, presence_penalty, frequency_penalty, max_tokens (/set alone: them all)
  /save FILE     write the conversation as JSON      /load FILE   continue a saved one
  /help          this list                           /exit        leave (also Ctrl-D)
Pasted text is one message. Typed over several lines: begin and end it with \"\"\", or end lines with \\.
Ctrl-C stops a reply and keeps what was written."""
FENCE = '"""'  # a message of several lines, as in Ollama
SETTABLE = {"temperature": float, "top_k": int, "top_p": float, "min_p": float, "seed": int, "repeat_penalty": float,
            "repeat_last_n": int, "presence_penalty": float, "frequency_penalty": float, "max_tokens": int}
DRAFT_COLOR = "cyan"


class SessionTotals:
    def __init__(self) -> None:
        self.n = Counter()
        self.phase = Counter()
        self.drafted_by, self.accepted_by = Counter(), Counter()

    def add(self, s) -> None:
        self.n.update(tokens=s.n_tokens, rounds=s.n_rounds, drafted=s.n_drafted, accepted=s.n_accepted, turns=1)
        self.n["gen_s"] += s.generation_s
        self.phase.update(s.phase_s)
        self.drafted_by.update(s.drafted_by_source)
        self.accepted_by.update(s.accepted_by_source)

    def line(self) -> str:
        n = self.n
        if not n["tokens"]:
            return "no tokens yet"
        parts = [f"{n['turns']} replies, {n['tokens']} tokens", f"{n['tokens'] / n['gen_s']:.1f} tok/s"]
        if n["drafted"]:
            by = ", ".join(f"{k} {self.accepted_by[k]}/{v}" for k, v in self.drafted_by.items())
            parts.append(f"acceptance {100 * n['accepted'] / n['drafted']:.0f}% ({by}), "
                         f"{n['accepted'] / n['rounds']:.2f} accepted/round")
        total = sum(self.phase.values()) or 1.0
        parts.append("time " + " / ".join(f"{p} {100 * self.phase[p] / total:.0f}%" for p in PHASES))
        return ", ".join(parts)


class Repl:
    def __init__(self, engine, sampling, max_tokens, stop, system, template, color, constraint=None) -> None:
        self.engine, self.sampling, self.max_tokens, self.stop = engine, sampling, max_tokens, stop
        self.constraint = constraint  # every reply must match it (a grammar, a JSON schema)
        self.template, self.color = template, color
        self.conv = Conversation(system)
        self.tty = sys.stdin.isatty()
        self.session = SessionTotals()
        self.last = None  # the last reply's stats
        self.saved = 0  # turns written by the last /save or read by /load

    def say(self, text: str) -> None:
        """Messages about the chat (not the reply): dim on a terminal, stderr when scripted."""
        if self.color:
            click.secho(text, dim=True, err=not self.tty)
        else:
            click.echo(text, err=not self.tty)

    def run(self) -> None:
        if self.tty:
            import readline  # line editing and history for input()

            if "libedit" not in (readline.__doc__ or ""):
                # Pasted text arrives whole, newlines and all, as one message (Python turns GNU readline's bracketed
                # paste off for its own prompt; a chat wants it on: pasted code is one message, not one per line).
                readline.parse_and_bind("set enable-bracketed-paste on")

            self.say("edgespec chat: type a message, /help for commands, Ctrl-D to leave")
        interrupted = False
        while True:
            try:
                if not self.step():
                    break
                interrupted = False
            except (Terminated, Exception):  # a signal, or a bug of ours: keep the conversation, then stop
                self.rescue()
                raise
            except KeyboardInterrupt:  # at the prompt (a reply catches its own): once warns, twice leaves
                if interrupted:
                    break
                interrupted = True
                try:
                    click.echo("")
                    self.say("(Ctrl-C again or Ctrl-D to leave)")
                except KeyboardInterrupt:
                    break
        if self.tty:
            click.echo("")

    def step(self) -> bool:
        """Read one message (or command) and act on it; False means leave."""
        try:
            line = input("> ") if self.tty else sys.stdin.readline()
        except EOFError:
            return False
        if not self.tty and not line:
            return False  # end of piped input
        line = line.rstrip("\n")
        if not line.strip():
            return True
        if line.startswith("/"):
            return self.command(line)
        message = self.more_lines(line) if self.tty else line
        if message.strip():
            self.reply(message)
        return True

    def more_lines(self, line: str) -> str:
        """On a terminal, a message may take several lines (pasted code): from a line that begins with FENCE to one
        that ends with it (as in Ollama), or lines ending in a backslash, each joined to the next (as in
        llama.cpp). Ctrl-D inside sends what was typed. Piped input stays one message per line, as scripts expect."""
        lines = []
        if line.startswith(FENCE):
            line = line[len(FENCE):]
            while not line.rstrip().endswith(FENCE):
                lines.append(line)
                try:
                    line = input("... ")
                except EOFError:
                    return "\n".join(lines)
            lines.append(line.rstrip()[:-len(FENCE)])
            return "\n".join(lines).strip("\n")
        while line.endswith("\\"):
            lines.append(line[:-1])
            try:
                line = input("... ")
            except EOFError:
                line = ""
                break
        return "\n".join([*lines, line])

    def command(self, line: str) -> bool:
        """Run a slash command; False means leave."""
        name, _, arg = line.partition(" ")
        arg = arg.strip()
        if name in ("/exit", "/quit", "/bye"):
            return False
        if name == "/help":
            self.say(HELP)
        elif name == "/stats":
            if self.last is not None:
                self.say("this reply: " + self.last.summary())
            self.say("session: " + self.session.line())
            if self.engine.model.rpc:
                self.say(f"the target runs on rpc-servers {', '.join(self.engine.model.rpc)}: verify holds their "
                         "network round trips")
        elif name == "/reset":
            self.conv = Conversation(self.conv.system)
            self.saved = len(self.conv.turns)
            self.say("conversation cleared")
        elif name == "/set":
            self.setting(arg)
        elif name == "/system":
            self.conv.system = arg or None
            self.say(f"system prompt {'set' if arg else 'removed'}")
        elif name in ("/save", "/load"):
            if not arg:
                self.say(f"usage: {name} FILE")
                return True
            arg = os.path.expanduser(arg)  # ~/chat.json, as a shell would read it
            if name == "/save":
                try:
                    self.conv.save(arg)
                    self.saved = len(self.conv.turns)
                    self.say(f"saved {len(self.conv.turns)} messages to {arg}")
                except OSError as e:
                    self.say(f"cannot write {arg}: {e.strerror or e} (nothing was changed there)")
            else:
                try:
                    self.conv = Conversation.load(arg)
                    self.saved = len(self.conv.turns)
                    self.say(f"loaded {len(self.conv.turns)} messages from {arg}")
                except EdgespecError as e:
                    self.say(f"{e} (not loaded; the conversation is as it was)")
        else:
            self.say(f"unknown command {name}; /help lists them")
        return True

    def setting(self, arg: str) -> None:
        """/set NAME VALUE: a sampling setting (or max_tokens) for the replies from now on, checked as the command
        line's; /set alone: what they are."""
        if not arg:
            now = {name: getattr(self.sampling, name) for name in SETTABLE if name != "max_tokens"}
            now["max_tokens"] = self.max_tokens
            self.say(", ".join(f"{name} {'random' if value is None else value}" for name, value in now.items()))
            return
        name, _, value = arg.partition(" ")
        name, value = name.replace("-", "_"), value.strip()
        if name not in SETTABLE:
            self.say(f"unknown setting {name}; /set alone lists them")
            return
        try:
            try:
                number = SETTABLE[name](value)
            except ValueError:
                raise InvalidArgument(f"{value!r} is not {'an integer' if SETTABLE[name] is int else 'a number'}") \
                    from None
            if name == "max_tokens":
                if number < 1:
                    raise InvalidArgument("max_tokens must be at least 1")
                self.max_tokens = number
            else:
                self.sampling = dataclasses.replace(self.sampling, **{name: number})
        except InvalidArgument as e:
            self.say(f"/set {name}: {e} (unchanged)")
            return
        self.say(f"{name} set to {value}")

    def prompt_tokens(self) -> list[int] | None:
        """The conversation in tokens, moving the oldest exchanges out of the model's window until it and a reply
        fit the context (they stay in the conversation, and in what /save writes)."""
        n_ctx = self.engine.target.n_ctx
        room = min(self.max_tokens, n_ctx // 4)  # keep at least this much for the reply
        tokens = self.engine.tokenize_chat(self.conv.messages(), self.template)
        dropped = 0
        while len(tokens) + room > n_ctx:
            n = self.conv.drop_oldest_exchange()
            if not n:
                break
            dropped += n
            tokens = self.engine.tokenize_chat(self.conv.messages(), self.template)
        if dropped:
            self.say(f"(context full: dropped the oldest {dropped} message(s) from what the model sees; /save still "
                     "keeps them)")
        if len(tokens) >= n_ctx:
            self.say(f"(that message is {len(tokens)} tokens, more than the {n_ctx}-token context; use --ctx-size; "
                     "not sent)")
            return None
        return tokens

    def reply(self, text: str) -> None:
        if _not_utf8(text):
            self.say("(that line is not valid UTF-8 text; not sent)")
            return
        self.conv.add("user", text)
        try:
            tokens = self.prompt_tokens()
        except EdgespecError as e:  # e.g. a template that refuses a system message: say so, stay at the prompt
            tokens = None
            self.say(f"error: {e} (not sent)")
        if tokens is None:
            self.conv.turns.pop()
            return
        out, result = [], None
        shown, reading = Shown(self.color, self.engine, tokens), PromptProgress()
        try:
            for r in self.engine.stream(tokens, max_tokens=self.max_tokens, sampling=self.sampling, stop=self.stop,
                                        constraint=self.constraint, prompt_progress=reading):
                if r.text:
                    out.append(r.text)
                    shown.add(r.text, r.from_draft)
                result = r.result
            shown.end()
        except KeyboardInterrupt:
            reading.clear()
            click.echo("")
            self.say("(interrupted; the reply so far is kept)")
        except EdgespecError as e:
            reading.clear()
            click.echo("")
            self.say(f"error: {e} (the reply so far is kept)")
        except (Terminated, Exception):  # the chat ends: the reply so far goes with what run() saves
            reading.clear()
            click.echo("")
            self.conv.add("assistant", "".join(out))
            raise
        else:
            click.echo("")
            if result.finish_reason == "length" and len(result.tokens) < self.max_tokens:
                self.say("(the context is full; older messages will leave the model's window next turn)")
            self.last = result.stats
            self.session.add(result.stats)
        for note in self.engine.notes:  # e.g. a profile ignored at the first drafted reply
            self.say(f"note: {note}")
        self.engine.notes.clear()
        self.conv.add("assistant", "".join(out))

    def unsaved(self) -> bool:
        return len(self.conv.turns) > self.saved

    def rescue(self) -> None:
        """Stopped by a signal (SIGTERM, SIGHUP: the terminal went away) or an error of ours: keep what was said
        since the last /save."""
        if not self.unsaved():
            return
        path = rescue_dir() / f"chat-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.json"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.conv.save(path)
            message = f"edgespec: the conversation was saved to {path} (/load it to continue)"
        except OSError as e:
            message = f"edgespec: could not save the conversation to {path}: {e.strerror or e}"
        try:
            click.echo(message, err=True)
        except OSError:
            pass  # no terminal left to tell


class Shown:
    """A reply as the terminal shows it: drafted tokens coloured; a thinking model's reasoning dim, without its
    tags, a blank line before the answer. Without colour it is printed as written (what /save keeps either way)."""

    def __init__(self, color: bool, engine, prompt: list[int]) -> None:
        self.color = color
        ids = reasoning.markers(engine.model) if color else None
        self.thoughts = reasoning.Thoughts(reasoning.opened(prompt, ids)) if ids else None
        self.thought = False  # reasoning was shown, the answer not yet

    def add(self, text: str, drafted: bool = False, end: bool = False) -> None:
        thought, text = self.thoughts.feed(text, end) if self.thoughts is not None else ("", text)
        if thought:
            click.secho(thought, nl=False, dim=True)
            self.thought = True
        if text and self.thought:
            click.echo("\n")
            self.thought = False
        if text and self.color and drafted:
            click.secho(text, nl=False, fg=DRAFT_COLOR)
        elif text:  # (secho would add a reset code after each token, --no-color or not)
            click.echo(text, nl=False)

    def end(self) -> None:
        if self.thoughts is not None:
            self.add("", end=True)


def rescue_dir() -> Path:
    from .default_model import home

    return home() / "chats"


def _not_utf8(text: str) -> bool:
    """Lines are read with surrogateescape: bytes that were not UTF-8 come through as lone surrogates."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
