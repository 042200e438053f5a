"""The Host header check of the metrics endpoint: a defence against DNS rebinding.

A web page in a browser on this machine can make its own host name resolve to 127.0.0.1 and then read
http://its-name:PORT/metrics as same-origin. The request still says `Host: its-name:PORT`: only names the
endpoint is known by are answered (its address, loopback names when bound to loopback, this machine's name
when bound beyond it). An IP address as Host cannot be such a page's origin, so none is refused on a wildcard bind.
"""

from __future__ import annotations

import ipaddress
import socket

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def host_name(header: str) -> str:
    """The host part of a Host header ("[::1]:9464" -> "::1", "Name.:80" -> "name"), lowercased."""
    text = header.strip().lower()
    if text.startswith("["):  # an IPv6 literal, with or without a port after it
        return text[1:text.find("]")] if "]" in text else text[1:]
    if text.count(":") == 1:  # name:port (more than one colon: a bare IPv6 literal, which has no port)
        text = text.split(":", 1)[0]
    return text.rstrip(".")  # ("localhost." is localhost: the absolute form of the same name)


def accepted_names(bound: str) -> tuple[str, ...]:
    """The names (besides IP literals on a wildcard bind) a Host header may give for an endpoint bound to `bound`."""
    address = _address(bound)
    if address is not None and address.is_loopback:
        return (str(address), *LOOPBACK_NAMES)
    # Bound to an interface others reach: Prometheus may name this machine (its host name) or the address.
    name = socket.gethostname().lower()
    return (bound.lower(), name, name.split(".", 1)[0], *LOOPBACK_NAMES)


def refusal(header: str | None, bound: str) -> str | None:
    """Why a request with this Host header is not answered by an endpoint bound to `bound`; None when it is.

    No header at all (an HTTP/1.0 client, not a browser) is answered.
    """
    if header is None:
        return None
    name = host_name(header)
    address = _address(name)
    wildcard = _address(bound) is not None and _address(bound) in (ipaddress.ip_address("0.0.0.0"),
                                                                    ipaddress.ip_address("::"))
    if address is not None:
        # (the same address however written: "::1" and "0:0:0:0:0:0:0:1")
        if wildcard or any(address == _address(n) for n in accepted_names(bound)):
            return None
    elif name in accepted_names(bound):
        return None
    names = ", ".join(f"[{n}]" if ":" in n else n for n in accepted_names(bound))
    return (f"Host {header!r} is not a name of this endpoint (a defence against DNS rebinding): request "
            f"/metrics by {'any IP address or ' if wildcard else ''}{names}")
