"""Headers every answer carries, set just before they are sent (streams and files too): the
dashboard may load only its own script, style and API (no inline script, no other origin),
may not be framed, and no answer is sniffed into another type."""

from __future__ import annotations

from aiohttp import web

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """aiohttp's on_response_prepare signal: runs for every answer, errors included."""
    response.headers.update(SECURITY_HEADERS)
