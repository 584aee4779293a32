"""How the edgespec process ends: SIGTERM and SIGHUP become exceptions that stop work as Ctrl-C does, and every
way a command can stop becomes one line on stderr and a documented exit code, never a traceback. The program starts
here (launch()), so its own imports are light: a signal must be handled from the first moment.

Exit codes: 0 done; 1 could not do what was asked (a model file, a download, the context, writing the output);
2 the command line, the settings file or an EDGESPEC_* variable is wrong; 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP
(after printing what was generated); 75 an rpc-server went away mid-decode (backend/rpc.py); 70 a bug of ours.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

from .errors import EdgespecError, InvalidArgument, Terminated

EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_BUG = 1, 2, 130, 70
SIGNAL_EXIT = {signal.SIGTERM: 143, signal.SIGHUP: 129}


def launch() -> None:
    """The `edgespec` program (its console script, `python -m edgespec`, cli.py). A signal that comes while the
    command line's modules import (click, the options: a fraction of a second, more on a busy machine, where a
    Ctrl-C in the first 0.1-0.2 s was a traceback) is held, then stops the process as it would
    have later: one line and its exit code."""
    held: list[int] = []
    for signum in (signal.SIGINT, *SIGNAL_EXIT):
        _catch(signum, lambda signum, frame: held.append(signum))
    from .cli import Interrupted, cli

    run(cli, None, Interrupted, held)


def run(command, argv: list[str] | None, interrupted: type[BaseException], held: list[int] | None = None) -> None:
    """Run a click command (standalone_mode off, so that this function decides every exit) and exit. held: signals
    that came before (launch())."""
    import click

    try:
        for signum in SIGNAL_EXIT:  # stop as Ctrl-C does: what was generated is printed (and a chat kept)
            _catch(signum, _terminate)
        _catch(signal.SIGINT, _interrupt)
        sys.unraisablehook = _unraisable
        if held:
            raise KeyboardInterrupt if held[0] == signal.SIGINT else Terminated(SIGNAL_EXIT[held[0]])
        if hasattr(sys.stdin, "reconfigure"):  # bytes that are not UTF-8 arrive as lone surrogates, checked in use
            sys.stdin.reconfigure(errors="surrogateescape")
        command.main(args=argv, prog_name="edgespec", standalone_mode=False)
        code = 0
    except click.exceptions.Exit as e:
        code = e.exit_code
    except click.UsageError as e:
        hint = f" (see `{e.ctx.command_path} --help`)" if e.ctx is not None else ""
        code = _say(" ".join(e.format_message().split()) + hint, EXIT_USAGE)
    except click.ClickException as e:
        code = _say(" ".join(e.format_message().split()), e.exit_code)
    except (KeyboardInterrupt, interrupted, click.exceptions.Abort):
        code = _say("interrupted", EXIT_INTERRUPTED, prefix="edgespec: ")
    except Terminated as e:
        code = _say("terminated", e.args[0] if e.args else 143, prefix="edgespec: ")
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as click does inside a command
        _silence_stdout()
        code = EXIT_ERROR
    except EdgespecError as e:
        from .settings import SettingsError

        code = _say(str(e), EXIT_USAGE if isinstance(e, (SettingsError, InvalidArgument)) else EXIT_ERROR)
    except OSError as e:  # standard output on a full disk; a cache folder that cannot be made
        reason = e.strerror or str(e)
        code = _say(f"{e.filename}: {reason}" if e.filename else f"cannot write the output: {reason}", EXIT_ERROR)
        _silence_stdout()
    except Exception as e:  # a bug of ours: still one line, with what to do about it
        if os.environ.get("EDGESPEC_DEBUG"):
            raise
        code = _say(f"internal error: {type(e).__name__}: {e} (please report it; EDGESPEC_DEBUG=1 shows the "
                    "traceback)", EXIT_BUG)
    sys.exit(code)


def ignored(signum: int) -> bool:
    """Whether this process was started with the signal ignored: `nohup` ignores SIGHUP, a shell script starts its
    background jobs with SIGINT ignored. That is the parent's choice and is kept (no handler of ours is put over it):
    `nohup edgespec serve` outlives its terminal (it used to end with exit 129 when the terminal closed)."""
    return signal.getsignal(signum) is signal.SIG_IGN


def _catch(signum: int, handler) -> None:
    if not ignored(signum):
        signal.signal(signum, handler)


def _terminate(signum, frame) -> None:
    if not _deferred(signum, frame):
        raise Terminated(SIGNAL_EXIT.get(signum, 143))


def _interrupt(signum, frame) -> None:
    if not _deferred(signum, frame):
        raise KeyboardInterrupt


def _unraisable(info) -> None:
    """An interrupt raised where Python can only print and drop it (a __del__, a ctypes callback not listed below)
    would be lost, the command running on to its end (the shape of a test failure seen once, not traced to it):
    the signal is sent again a moment later, once back in ordinary code. Anything else is reported as usual."""
    exc = info.exc_value
    if isinstance(exc, (KeyboardInterrupt, Terminated)):
        signum = signal.SIGINT if isinstance(exc, KeyboardInterrupt) else \
            {code: s for s, code in SIGNAL_EXIT.items()}.get(exc.args[0] if exc.args else 143, signal.SIGTERM)
        threading.Timer(0.005, os.kill, (os.getpid(), signum)).start()
        return
    sys.__unraisablehook__(info)


# Python callbacks llama.cpp calls (its log, a load's progress): an exception raised in one cannot cross into C,
# ctypes prints and drops it, and the signal would be lost (seen: Ctrl-C during start-up ignored, exit 0).
_CALLBACKS = {("edgespec.backend.llama", "_log_callback"), ("edgespec.backend.llama", "progress"),
              ("llama_cpp._logger", "llama_log_callback")}


@contextlib.contextmanager
def held_interrupts():
    """Ctrl-C while third-party packages import (some of them catch exceptions broadly, and one was seen to swallow
    the KeyboardInterrupt: exit 0 after a full run) is held, and raised once the block is done."""
    if threading.current_thread() is not threading.main_thread() or ignored(signal.SIGINT):
        yield
        return
    got: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
    if got:
        raise KeyboardInterrupt


def _deferred(signum: int, frame) -> bool:
    """Inside such a callback: send the signal again a moment later, once back in ordinary Python code."""
    while frame is not None:
        if (frame.f_globals.get("__name__"), frame.f_code.co_name) in _CALLBACKS:
            threading.Timer(0.005, os.kill, (os.getpid(), signum)).start()
            return True
        frame = frame.f_back
    return False


def _say(message: str, code: int, prefix: str = "edgespec: error: ") -> int:
    import click

    try:
        click.echo(prefix + message, err=True)
    except OSError:
        pass
    return code


def _silence_stdout() -> None:
    """After a failed write, Python would fail again flushing stdout at exit: point it at /dev/null."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
