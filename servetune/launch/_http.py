"""A minimal HTTP probe of the server (stdlib only: readiness, `/server_info`, identity)."""

from __future__ import annotations

import http.client
from collections.abc import Mapping

__all__ = ["connect_host", "http_get"]


def connect_host(host: str) -> str:
    """The address to connect to for a bind address (`0.0.0.0` → `127.0.0.1`, `::` → `::1`)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def http_get(
    host: str, port: int, path: str, *, timeout: float = 5.0, headers: Mapping[str, str] | None = None
) -> tuple[int, bytes] | None:
    """GET `path`; (status, body), or None when nothing answers (refused, reset, timeout)."""
    conn = http.client.HTTPConnection(connect_host(host), port, timeout=timeout)
    try:
        conn.request("GET", path, headers=dict(headers or {}))
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
