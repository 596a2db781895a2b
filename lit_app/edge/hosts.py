"""Host names as the server's rules read them: loopback and wildcard addresses, "name:port" parsing."""

from __future__ import annotations

import ipaddress

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def is_wildcard(host: str) -> bool:
    """True for an address that binds every interface (0.0.0.0, ::, empty)."""
    return host.strip("[]") in ("", "0.0.0.0", "::")


def is_loopback(host: str) -> bool:
    """True for localhost and loopback IP literals (127.0.0.0/8, ::1)."""
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_ip(name: str) -> bool:
    """True for an IP literal (v4 or v6, without brackets)."""
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def url_host(host: str) -> str:
    """`host` as a URL spells it (an IPv6 literal in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def parse_host(value: str, default_port: int) -> tuple[str, int] | None:
    """'Name:port' / '[v6]:port' / 'name' -> (lower-case name without brackets, port); None if malformed."""
    value = value.strip()
    if not value:
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1:]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:]
    elif value.count(":") == 1:
        name, port_text = value.split(":")
    elif ":" in value:  # a bare IPv6 address (only in --allowed_hosts)
        name, port_text = value, ""
    else:
        name, port_text = value, ""
    name = name.lower().rstrip(".")
    if not name or any(c in name for c in "/\\@ \t"):
        return None
    if not port_text:
        return name, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return None
    return name, int(port_text)

