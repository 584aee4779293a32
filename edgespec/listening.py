"""The server's address: whether it is this machine's alone, and its socket, bound before the model loads so that a
port in use or a host that is not this machine's is one line at once."""
from __future__ import annotations

import errno
import socket

from .errors import EdgespecError


def loopback(host: str) -> bool:
    """Whether an address to listen on is reachable from this machine alone."""
    return host in ("localhost", "::1") or host.startswith("127.")


_HINTS = {errno.EADDRINUSE: "another program listens there; choose another --port",
          errno.EACCES: "ports under 1024 need root; choose another --port",
          errno.EADDRNOTAVAIL: "that address is not this machine's; see --host"}


def listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound before the model loads: a port in use, or a host that is not this machine's, is
    one line and exit 1 at once (uvicorn would log its own line and exit 3, the model already loading)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        hint = _HINTS.get(e.errno, "see --host and --port")
        raise EdgespecError(f"cannot listen on {host}:{port}: {e.strerror or e} ({hint})") from None
    return sock
