"""The TLS context of the service's own HTTP clients (to kagent's agents, to real MCP servers), made once per
process. httpx makes one for every client it builds (certifi's roots, or SSL_CERT_FILE / SSL_CERT_DIR, loaded
again: about 30 ms of CPU, over 100 ms on a busy machine), and the service builds a client for each A2A call:
a judgment's every ask and every poll of its task. Measured in bench/README.md, "Suites"."""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def tls() -> ssl.SSLContext:
    """httpx's default context (the same roots, the same environment), shared by every client of the process."""
    return httpx.create_ssl_context()
