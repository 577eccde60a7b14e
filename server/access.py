"""Who may use a server reachable from the network: a token the client presents at `initialize`."""

from __future__ import annotations

import hmac
import ipaddress
from typing import Any

TOKEN_ENV = "CUDA_AGENT_TOKEN"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name may resolve to anything: treat it as reachable from outside


def presented_token(initialization_options: Any) -> str | None:
    if isinstance(initialization_options, dict):
        token = initialization_options.get("token")
        return token if isinstance(token, str) else None
    return None


def token_accepted(expected: str | None, presented: str | None) -> bool:
    if expected is None:
        return True
    # Constant-time, so the comparison does not leak how much of a guess was right.
    return presented is not None and hmac.compare_digest(expected.encode(), presented.encode())
