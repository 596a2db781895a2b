"""The server's access token: its names, a fresh one, the header a script sends, and log redaction."""

from __future__ import annotations

import re
import secrets
import urllib.parse

TOKEN_PARAM = "token"
TOKEN_ENV = "SEQUENCE_SALIENCE_TOKEN"

_QUERY_PAIR = re.compile(r"(?<=[?&;])([^=&;\s\"']*)(=|%3[Dd])([^&;\s\"']+)")


def redact(text: str) -> str:
    """`text` with the value of every `token=` query parameter replaced by `[redacted]`.

    Keys are compared after %-decoding (`tok%65n=`), case-insensitively.
    """
    def one(m: re.Match) -> str:
        key = urllib.parse.unquote_plus(m.group(1)).strip().lower()
        return f"{m.group(1)}{m.group(2)}[redacted]" if key.endswith(TOKEN_PARAM) else m.group(0)

    return _QUERY_PAIR.sub(one, text)


def new_token() -> str:
    """A fresh random token (48 hex digits)."""
    return secrets.token_hex(24)


def token_headers(token: str | None) -> dict[str, str]:
    """The header a script sends with a token ({} for none)."""
    return {"Authorization": f"token {token}"} if token else {}
