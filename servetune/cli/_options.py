"""Checks of option values the CLI shares (the options themselves are declared on the settings they
fill: `servetune.options`, `servetune.cli._declare`)."""

from __future__ import annotations


def check_url(url: str, option: str = "--url") -> str:
    """`url` if it is an http(s) URL with a host and a valid port.

    Raises:
        SpecError: naming `option`, with an example.
    """
    from urllib.parse import urlsplit

    from servetune.errors import SpecError

    example = f"e.g. {option} http://127.0.0.1:30000"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port outside 0-65535 or not a number
    except ValueError as exc:
        raise SpecError(f"{option} {url!r} is not a valid URL: {exc}", help=example) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecError(f"{option} {url!r} is not an http:// or https:// URL with a host", help=example)
    return url
