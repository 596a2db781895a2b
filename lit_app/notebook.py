"""LIT in a notebook behind the server's request rules (loopback only).

`lit_nlp.notebook.LitWidget` serves LIT's plain app: any web page the user opens
could POST to it (no Host, Origin or Content-Type checks). `LitWidget` here
serves the same app as `python -m lit_app.server` (`server.build_app`) through
`security.SecureApp` on `localhost`, on a free port, on a thread of this kernel:

* Host must be `localhost`, `127.0.0.1` or `[::1]` with the widget's port (plus
  `allowed_hosts`, e.g. a notebook proxy's name), else 403: DNS rebinding fails.
* POSTs need `Content-Type: application/json`, a same-origin `Origin` (when
  sent) and no cross-site `Sec-Fetch-Site`, else 403: other pages cannot drive it.
* A token, as on the server (and as Jupyter does on loopback): any other local
  process or user could otherwise drive the widget's port. `render()` loads the
  UI with `?token=`, which sets the HttpOnly SameSite=Strict cookie; scripts
  send `widget.headers` (`Authorization: token ...`). `no_token=True` opts out
  (with a warning).
* Limits, one-line errors and bounded connections as on the server; no file
  endpoints (no `data_dir`).

The client root's request guard (lit_app/serving/client_build.py) adds the JSON
Content-Type to the UI's own POSTs, so the UI in the output cell works as before.

    widget = LitWidget(lit_models, datasets.get_datasets(), client_root=root, height=900)
    widget.render()          # LIT's iframe (Jupyter / Colab), from lit_nlp.notebook, with the token
    widget.url               # http://localhost:<port>/?token=... (for a browser tab)
    widget.base_url          # http://localhost:<port>/ ; scripts add widget.headers
    widget.stop()
"""

from __future__ import annotations

import logging
import threading
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from lit_nlp import notebook as lit_notebook
from lit_nlp.api import dataset as lit_dataset
from lit_nlp.api import model as lit_model

from lit_app.edge import limits as limits_lib, http_server, security, tokens
from lit_app import server
from lit_app.edge.security_config import SecurityConfig

HOST = "localhost"
logger = logging.getLogger("lit_app.notebook")


class _WithToken:
    """LIT's RenderConfig with `token=` added to the query it renders (read by lit_nlp.notebook)."""

    def __init__(self, config: lit_notebook.RenderConfig, token: str):
        self.config, self.token = config, token

    def get_query_str(self) -> str:
        query = self.config.get_query_str()
        return query + ("&" if len(query) > 1 else "") + urllib.parse.urlencode({tokens.TOKEN_PARAM: self.token})


class _Served:
    """What `lit_nlp.notebook.LitWidget.render` / `ui_state` / `stop` read from `_server`."""

    def __init__(self, httpd: http_server.BoundedThreadedServer, app: server.SequenceSalienceApp):
        self.httpd, self.app = httpd, app
        self.port = int(httpd.server_port)
        self._thread = threading.Thread(target=httpd.serve_forever, name=f"lit-notebook-{self.port}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self.httpd.shutdown()
            self._thread.join()
        self.httpd.server_close()


class LitWidget(lit_notebook.LitWidget):
    """LIT's notebook widget over `server.build_app`, behind `security.SecureApp` (module docstring)."""

    def __init__(  # pylint: disable=super-init-not-called
        self,
        lit_models: Mapping[str, lit_model.Model],
        lit_datasets: Mapping[str, lit_dataset.Dataset],
        *,
        client_root: str | None = None,
        height: int = 1000,
        render: bool = False,
        proxy_url: str | None = None,
        allowed_hosts: Sequence[str] = (),
        token: str | None = None,
        no_token: bool = False,
    ):
        """Args:
          lit_models, lit_datasets, client_root: as for `server.build_app`.
          height, render, proxy_url: as for `lit_nlp.notebook.LitWidget`.
          allowed_hosts: Host names to accept besides localhost (a notebook proxy's), as --allowed_hosts.
          token: the token requests must carry; default: a fresh random one.
          no_token: serve without a token (any local process or user can then drive it).
        """
        if no_token and token:
            raise ValueError("LitWidget: pass token= or no_token=True, not both.")
        if no_token:
            logger.warning("LitWidget(no_token=True): any process or user on this machine can drive the port it serves.")
        # LIT's __init__ is not called: it would start LIT's own server, without these rules.
        app = server.build_app(lit_models, lit_datasets, client_root, sync_state=True)
        limits = limits_lib.Limits()
        httpd = http_server.make_server(HOST, 0, app, limits.max_connections,  # port 0: a free one, no race
                                        limits.max_connections_per_client)
        self.config = SecurityConfig(host=HOST, port=int(httpd.server_port),
                                     allowed_hosts=tuple(allowed_hosts), limits=limits,
                                     token=None if no_token else (token or tokens.new_token()))
        httpd.app = security.SecureApp(app, self.config)
        self._server: Any = _Served(httpd, app)
        self._height = height
        self._proxy_url = proxy_url
        if render:
            self.render()

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def token(self) -> str | None:
        return self.config.token

    @property
    def base_url(self) -> str:
        """http://localhost:<port>/ (scripts add `headers`)."""
        return f"http://{HOST}:{self.port}/"

    @property
    def url(self) -> str:
        """The URL to open in a browser: with ?token=, which sets the cookie."""
        return self.base_url + (f"?{tokens.TOKEN_PARAM}={self.token}" if self.token else "")

    @property
    def headers(self) -> dict[str, str]:
        """{"Authorization": "token <t>"} for scripts ({} with no_token)."""
        return tokens.token_headers(self.token)

    def render(self, height: int | None = None, open_in_new_tab: bool = False,
               ui_params: lit_notebook.RenderConfig | None = None, data: Sequence[Mapping[str, Any]] | None = None):
        """LIT's `render` (same arguments), loading the UI with the token."""
        ui_params = ui_params or lit_notebook.RenderConfig()
        if data:
            ui_params.datapoints = data
        shown: Any = _WithToken(ui_params, self.token) if self.token else ui_params
        super().render(height=height, open_in_new_tab=open_in_new_tab, ui_params=shown)
