"""The chat page `edgespec serve` gives a browser at / (as llama-server serves its web UI): edgespec/web/'s page and
its two scripts, with headers that let the page load and call nothing but this server. The page is static; its calls
to the API carry the key its settings hold."""
from __future__ import annotations

import functools
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response

# the page's own script and calls only; inline styles (its one <style>), no inline scripts, no frames around it
POLICY = ("default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; img-src 'self' data:; "
          "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
TYPES = {"index.html": "text/html; charset=utf-8", "chat.js": "text/javascript; charset=utf-8",
         "markdown.js": "text/javascript; charset=utf-8"}


@functools.cache
def _read(name: str) -> bytes:
    return resources.files(__package__).joinpath("web", name).read_bytes()


def wants_page(request: Request) -> bool:
    """A browser's visit (it asks for HTML), not a client checking that the server runs."""
    return "text/html" in request.headers.get("accept", "")


def page(name: str = "index.html") -> Response:
    return Response(_read(name), media_type=TYPES[name],
                    headers={"Content-Security-Policy": POLICY, "X-Content-Type-Options": "nosniff",
                             "Cache-Control": "no-cache"})
