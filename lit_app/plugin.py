"""Sequence Salience in your own LIT server: our model wrappers, modules, layouts, client root and rules.

    import sequence_salience as ss
    from lit_nlp import dev_server
    from lit_nlp.api import layout
    from lit_app import plugin

    lm = ss.load_model("default")                    # or any HF causal LM folder / id, a .gguf
    models = plugin.make_models(lm, "smollm2")       # generation, salience, tokenizer, inside, explain
    mine = layout.LitCanonicalLayout(
        left={"Data": [layout.LitModuleName.DataTableModule, layout.LitModuleName.SingleDatapointEditorModule]},
        upper={"Salience": [plugin.SALIENCE_MODULE], "Generated": [layout.LitModuleName.GeneratedTextModule]},
        lower={"Inside": [plugin.INSIDE_MODULE], "Tests": [plugin.EXPLAIN_MODULE]})
    dev_server.Server(models, {"mine": MyDataset()}, layouts={"mine": mine, **plugin.layouts()},
                      default_layout="mine", client_root=plugin.client_root(),
                      server_type=plugin.server_type(), host="127.0.0.1", port=5432).serve()

What each piece is:

* `make_models(lm, name)`: the LIT model map over one loaded `sequence_salience.LanguageModel`,
  named by LIT's prompt-debugging convention: `name` (generation: prompt -> response), and the
  hidden `_name_salience`, `_name_tokenizer`, `_name_inside_trace`, `_name_inside_intervene`,
  `_name_inside_search`, `_name_explain`. Our modules read these names; merge the map with yours
  (`{**your_models, **plugin.make_models(lm, "mine")}`). Your dataset needs a `prompt`
  TextSegment; `system` and `target` TextSegments are optional.
* `SALIENCE_MODULE`, `INSIDE_MODULE`, `EXPLAIN_MODULE`: `layout.ModuleConfig`s to place in your
  own `LitCanonicalLayout` beside LIT's modules; `layouts()`: our ready-made layouts.
* `client_root()`: the folder to pass as LIT's `client_root`: LIT's installed UI plus our bundle,
  local fonts and the request guard (lit_app/serving/client_build.py). LIT's own client root has no
  modules of ours, so it must be this one.
* `server_type()`: registers and returns the `dev_server.Server(server_type=...)` that serves
  LIT's app through our request rules (lit_app/edge/security.py: Host check, token, JSON-only
  same-origin POSTs, limits, no file endpoints unless `files_dir=`), prints
  "Sequence Salience is ready: <url with ?token=>" and stops cleanly on Ctrl-C. Its keyword
  arguments (passed through `dev_server.Server(...)`): host, port, token, no_token, allowed_hosts,
  files_dir (our --data_dir: the one folder LIT's file dialogs may use; LIT's own `data_dir=`
  is its prediction cache and goes to LIT's app), request_limits.
* `secure(app, ...)`: the same rules as WSGI middleware, for any other server (gunicorn,
  `dev_server.Server(server_type="external").serve()` returns LIT's app).

LIT's own app caches every prediction by datapoint id without bound; our wrappers keep their
own bounded caches and must see every progress poll, so `adapt(app)` (called by `secure` and
the server type) has LIT's app call them directly, as our server's app does.
"""

from __future__ import annotations

import logging
import os
import signal
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from lit_nlp import app as lit_app_lib
from lit_nlp import dev_server
from lit_nlp.api import layout
from lit_nlp.api import model as lit_model
from lit_nlp.lib import caching as lit_caching

import sequence_salience as ss
from sequence_salience.slices import DEFAULT_SLICE_S
from lit_app.serving import client_build, model_group, layouts as layouts_lib
from lit_app.edge import clients, disconnect, http_server, limits, security
from lit_app import server
from lit_app.edge.hosts import is_loopback
from lit_app.edge.security_config import SecurityConfig
from lit_app.model.shared_model import DEFAULT_MAX_NEW_TOKENS, SharedLM
from lit_app.edge.tokens import new_token
from lit_app.wrappers.wrapper import needs_model

logger = logging.getLogger("lit_app.plugin")

SALIENCE_MODULE = layout.ModuleConfig(layouts_lib.SALIENCE_MODULE_TAG)
INSIDE_MODULE = layout.ModuleConfig(layouts_lib.INSIDE_MODULE_TAG)
EXPLAIN_MODULE = layout.ModuleConfig(layouts_lib.EXPLAIN_MODULE_TAG)
DEFAULT_LAYOUT = layouts_lib.DEFAULT_LAYOUT
SERVER_TYPE = "sequence_salience"
READY_LINE = "Sequence Salience is ready:"

# SharedLMs made by make_models, so that the server type can stop their background work.
_SHARED: "weakref.WeakSet[SharedLM]" = weakref.WeakSet()


def make_models(lm: ss.LanguageModel, name: str = "lm", *, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                slice_s: float = DEFAULT_SLICE_S, inside: bool = True,
                explain_tests: bool = True) -> dict[str, lit_model.Model]:
    """Our LIT wrappers over one loaded LanguageModel (module docstring); the generation model first.

    A SharedLM over `lm` (one model lock, caches, jobs) wrapped by `model_group.lit_models`.

    inside / explain_tests: False leaves out the inside-the-model or test-this-explanation
    wrappers (their modules then say the model does not support them).
    """
    shared = SharedLM(lm, max_new_tokens=max_new_tokens, slice_s=slice_s)
    _SHARED.add(shared)
    return model_group.lit_models(shared, name, inside=inside, explain_tests=explain_tests)


def layouts() -> layout.LitComponentLayouts:
    """Our layouts ({name: LitCanonicalLayout}; `DEFAULT_LAYOUT` is our server's default) to merge with yours."""
    return layouts_lib.make_layouts(with_salience_module=True)


def client_root(output_dir: str | None = None) -> str:
    """Builds (or refreshes) the client root and returns its path (lit_app/serving/client_build.py).

    Raises FileNotFoundError when our bundle is missing (a checkout without `npm run build`, or
    an installation without its package data): LIT would otherwise refuse a layout naming our
    modules ("Malformed layout").
    """
    root = client_build.build_client_root(output_dir)
    if not os.path.isfile(os.path.join(root, client_build.BUNDLE_NAME)):
        raise FileNotFoundError(
            f"No {client_build.BUNDLE_NAME} in {root}: our modules cannot load. Fix: in a checkout run"
            " `make frontend`; otherwise reinstall the sequence-salience wheel (it carries the bundle).")
    return root


class _Uncached(lit_caching.CachingModelWrapper):
    """LIT's per-example wrapper without its cache (our wrappers cache by content, bounded)."""

    def predict(self, inputs, progress_indicator=None, **kw):
        return self.wrapped.predict(list(inputs), **kw)


def adapt(app: lit_app_lib.LitApp) -> lit_app_lib.LitApp:
    """Has LIT's app call our wrappers without its prediction cache; returns the app.

    Touches `LitApp._models`, LIT 1.3.1's model map, and its handlers (checked by
    tests/e2e/test_plugin_own_server.py); our own app does the same in its constructor and `make_handler`.
    """
    model_map = getattr(app, "_models", None)
    if not isinstance(model_map, dict):
        raise TypeError(f"adapt() expects LIT's LitApp (lit-nlp 1.3.x), got {type(app).__name__}.")
    for name, wrapper in list(model_map.items()):
        wrapped = getattr(wrapper, "wrapped", None)
        if getattr(wrapped, "caches_itself", False) and not isinstance(wrapper, _Uncached):
            model_map[name] = _Uncached(wrapped, name)
    # Our wrappers' client mistakes (RequestError) marked, so that `secure` answers 400 as our own
    # server does, not LIT's 500 (LIT 1.3.1 keeps the handlers in `app._wsgi_app._handlers`).
    handlers = getattr(getattr(app, "_wsgi_app", None), "_handlers", None)
    if isinstance(handlers, dict):
        for route, handler in list(handlers.items()):
            handlers[route] = security.mark_client_errors(handler)
    return app


class _Disconnects:
    """WSGI wrapper: long computations can ask whether their client is still there (lit_app/edge/disconnect.py)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]):
        self.app = app

    def __call__(self, environ, start_response):
        with disconnect.serving(environ), clients.serving(environ):
            return self.app(environ, start_response)


def security_config(host: str = "127.0.0.1", port: int = 5432, *, token: str | None = None, no_token: bool = False,
                    allowed_hosts: Sequence[str] = (), data_dir: str | None = None,
                    request_limits: limits.Limits | None = None) -> SecurityConfig:
    """Our server's request rules for `host:port`; a fresh token unless `token` is given or `no_token`."""
    if no_token and token:
        raise ValueError("Pass token= or no_token=True, not both.")
    if no_token and not is_loopback(host):
        raise ValueError(f"no_token is only for a loopback host; {host} is reachable from other machines.")
    generated = not no_token and not token
    return SecurityConfig(
        host=host, port=port, allowed_hosts=tuple(allowed_hosts),
        token=None if no_token else (token or new_token()), data_dir=data_dir,
        limits=request_limits or limits.Limits(), token_generated=generated)


def secure(app: lit_app_lib.LitApp, config: SecurityConfig) -> security.SecureApp:
    """LIT's app (ours or LIT's own) behind our request rules, as a WSGI app."""
    adapt(app)
    model_map = getattr(app, "_models")
    dataset_map = getattr(app, "_datasets", {})
    return security.SecureApp(_Disconnects(app), config, model_names=lambda: list(model_map),
                              dataset_names=lambda: list(dataset_map),
                              model_free_names=lambda: [n for n, m in model_map.items() if not needs_model(m)])


class SecureDevServer:
    """A `dev_server.Server` server type: LIT's app through `secure`, on our bounded threaded server."""

    def __init__(self, wsgi_app: lit_app_lib.LitApp, port: int = 5432, host: str = "127.0.0.1",
                 token: str | None = None, no_token: bool = False, allowed_hosts: Sequence[str] = (),
                 files_dir: str | None = None, request_limits: limits.Limits | None = None, **unused_kw):
        self.config = security_config(host, port, token=token, no_token=no_token, allowed_hosts=allowed_hosts,
                                      data_dir=files_dir, request_limits=request_limits)
        self.app = secure(wsgi_app, self.config)
        lim = self.config.limits
        self.httpd = http_server.make_server(host, port, self.app, lim.max_connections, lim.max_connections_per_client)

    @property
    def url(self) -> str:
        return self.config.browser_url()

    def serve(self) -> None:
        """Serves until Ctrl-C or SIGTERM, then stops the work in progress (as `sequence-salience-server`)."""
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:  # the handler is set before the ready line: whoever reads it may signal at once
            server.warn_if_sigint_ignored()
            print(f"{READY_LINE} {self.url}", flush=True)
            self.httpd.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
            shared = list(_SHARED)
            for extra in shared[1:]:
                extra.jobs.cancel_all()
            if shared:
                server.stop(self.httpd, shared[0])
            else:
                self.httpd.server_close()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def server_type() -> str:
    """Registers `SecureDevServer` with LIT's dev_server (its `WSGI_SERVERS` map) and returns its name."""
    dev_server.WSGI_SERVERS[SERVER_TYPE] = SecureDevServer
    return SERVER_TYPE


def serve(app: lit_app_lib.LitApp, host: str = "127.0.0.1", port: int = 5432, **kw) -> None:
    """Serves a LitApp you built yourself through our rules (blocks; keyword arguments as SecureDevServer)."""
    SecureDevServer(app, port=port, host=host, **kw).serve()
