"""What the server allows (`SecurityConfig`) and the command-line flags that set it (`define_flags`,
`config_from_args`): bound address, extra Host names, token, data folder, request limits."""

from __future__ import annotations

import argparse
import dataclasses
import os

from absl import flags

from sequence_salience.methods import get_method
from lit_app.edge.hosts import is_loopback, is_wildcard, parse_host, url_host
from lit_app.edge.http_server import HEADER_TIMEOUT_S
from lit_app.edge.limits import Limits
from lit_app.schema.method_registry import EXTRA_METHODS
from lit_app.edge.tokens import TOKEN_ENV, TOKEN_PARAM, new_token

# --help groups these flags under this label (lit_app/serving/server_flags.py lists the others).
FLAGS_MODULE = "security and limits (lit_app/edge/security_config.py)"


@dataclasses.dataclass(frozen=True)
class SecurityConfig:
    """What the middleware allows.

    Attributes:
      host: the address the server is bound to (--host).
      port: the port it listens on (--port).
      allowed_hosts: extra Host names ("name" matches any port, "name:port" that port; "*" any host).
      token: the token every request must carry; None: no token (the server's --no_token).
      data_dir: the one folder LIT's file-path endpoints may read and write; None: they are off.
      limits: request limits (lit_app.edge.limits.Limits).
      token_generated: True when the token was generated at start (printed in the URL).
    """

    host: str = "127.0.0.1"
    port: int = 5432
    allowed_hosts: tuple[str, ...] = ()
    token: str | None = None
    data_dir: str | None = None
    limits: Limits = Limits()
    token_generated: bool = False

    def __post_init__(self):
        if self.token is not None and len(self.token) < 8:
            raise ValueError("The token is shorter than 8 characters; use a longer --token (or none on loopback).")
        if not is_loopback(self.host) and not self.token:
            raise ValueError(f"--host {self.host} is not a loopback address, so a token is required"
                             " (drop --no_token).")
        if self.data_dir is not None and not os.path.isdir(self.data_dir):
            raise ValueError(f"--data_dir {self.data_dir!r} is not a folder. Fix: create it or pass another one.")

    @property
    def cookie_name(self) -> str:
        # Cookies ignore ports: one name per port keeps two local servers apart.
        return f"sequence_salience_token_{self.port}"

    def browser_url(self) -> str:
        """The address to open (with ?token= when there is one)."""
        host = "127.0.0.1" if is_wildcard(self.host) else self.host
        url = f"http://{url_host(host)}:{self.port}/"
        return f"{url}?{TOKEN_PARAM}={self.token}" if self.token else url


def define_flags(fv: flags.FlagValues) -> None:
    """Defines the security and limit flags in an absl FlagValues (lit_app/serving/server_flags.py)."""
    defaults = Limits()
    holders = [
        flags.DEFINE_multi_string(
            "allowed_hosts", [], "Extra Host names (NAME or NAME:PORT) to accept besides the bound address,"
            " localhost, 127.0.0.1 and [::1] (comma-separated or repeated; '*' accepts any).", flag_values=fv),
        flags.DEFINE_string(
            "token", None,
            "Token every request must carry (?token=, a cookie, or 'Authorization: token ...')."
            f" Default: ${TOKEN_ENV}, else one generated at start and printed in the URL. A --token on the"
            " command line is visible to every user of this machine (`ps`, /proc/<pid>/cmdline): prefer"
            f" `export {TOKEN_ENV}=...`, which is not.", flag_values=fv),
        flags.DEFINE_bool(
            "no_token", False, "Serve without a token (loopback --host only): any local process or user can then"
            " drive the server. The startup line warns.", flag_values=fv),
        flags.DEFINE_integer("max_body_bytes", defaults.max_body_bytes, "Largest request body (HTTP 413 beyond).",
                             flag_values=fv),
        flags.DEFINE_integer("max_prompt_chars", defaults.max_prompt_chars,
                             "Largest prompt + system + target of one input, in characters.", flag_values=fv),
        *(flags.DEFINE_integer(extra.limit, getattr(defaults, extra.limit),  # --max_ig_steps, ...
                               f"Largest {get_method(extra.method).label} count of {extra.unit} (at most"
                               f" {extra.maximum}).", flag_values=fv) for extra in EXTRA_METHODS),
        flags.DEFINE_integer("max_pending_requests", defaults.max_pending,
                             "Compute requests running or waiting for the model at once (HTTP 503 beyond).",
                             flag_values=fv),
        flags.DEFINE_integer("max_connections", defaults.max_connections,
                             "Open connections at once (one thread each; HTTP 503 beyond). A connection has"
                             f" {HEADER_TIMEOUT_S:g} s to send its headers; idle ones give their slot to new ones.",
                             flag_values=fv),
        flags.DEFINE_integer("max_connections_per_client", None,
                             "Open connections from one client address (default: half of --max_connections).",
                             flag_values=fv),
    ]
    for holder in holders:
        fv.register_flag_by_module(FLAGS_MODULE, fv[holder.name])


def config_from_args(args: argparse.Namespace) -> SecurityConfig:
    """The SecurityConfig of parsed flags; the token is --token, else $SEQUENCE_SALIENCE_TOKEN, else
    generated (unless --no_token)."""
    allowed = tuple(h.strip() for entry in args.allowed_hosts for h in entry.split(",") if h.strip())
    for h in allowed:
        if h != "*" and parse_host(h, args.port) is None:
            raise ValueError(f"--allowed_hosts entry {h!r} is not a host name or name:port.")
    # The variable is read here, not as the flag's default: --help would print a default's value.
    token, generated = args.token or os.environ.get(TOKEN_ENV) or None, False
    if getattr(args, "no_token", False):
        if token:
            raise ValueError("--no_token and --token (or $SEQUENCE_SALIENCE_TOKEN) contradict each other; pass one.")
        if not is_loopback(args.host):
            raise ValueError(f"--no_token is only for a loopback --host; {args.host} is reachable from other"
                             " machines, so a token is required.")
    elif not token:
        token, generated = new_token(), True
    lim = Limits(
        max_body_bytes=args.max_body_bytes,
        max_prompt_chars=args.max_prompt_chars,
        **{extra.limit: getattr(args, extra.limit) for extra in EXTRA_METHODS},
        max_pending=args.max_pending_requests,
        max_connections=args.max_connections,
        max_connections_per_client=args.max_connections_per_client or max(1, args.max_connections // 2),
    )
    data_dir = os.path.realpath(args.data_dir) if args.data_dir else None
    return SecurityConfig(host=args.host, port=args.port, allowed_hosts=allowed, token=token,
                          data_dir=data_dir, limits=lim, token_generated=generated)

