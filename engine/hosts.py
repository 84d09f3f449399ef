"""Which addresses a server may bind without a key: the HTTP server and the language server warn
(or refuse) on any other."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether `host` ("127.0.0.1", "::1", "localhost") is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
