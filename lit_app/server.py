"""The Sequence Salience LIT server: one command from a fresh checkout to a working UI.

    python -m lit_app.server [--model default] [--host 127.0.0.1] [--port 5432]
                             [--max_new_tokens 64] [--device cpu] [--dtype float32]
                             [--data prompts.jsonl] [--allowed_hosts NAME] [--token T | --no_token]
                             [--data_dir DIR] [--max_body_bytes N] [--max_prompt_chars N]
                             [--max_ig_steps N] [--max_smooth_grad_samples N]
                             [--max_pending_requests N] [--max_connections N]
                             [--max_connections_per_client N]

or the console script `sequence-salience-server` with the same flags. It checks
the data file, builds the offline client root, loads the model (logging
progress), then prints the URL once it accepts connections. Requests are served
on threads; model access is serialized by one lock (lit_app.shared_model.SharedLM).
Every request first passes lit_app.security.SecureApp (Host, token, JSON-only
same-origin POSTs, file paths only inside --data_dir, limits, one-line errors). A token
is required on every bind unless --no_token (loopback only): the printed URL carries it.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from lit_nlp import app as lit_app_lib
from lit_nlp.lib import caching as lit_caching
from lit_nlp.api import dataset as lit_dataset
from lit_nlp.api import model as lit_model

import sequence_salience as ss
from sequence_salience import model as model_lib
from sequence_salience.slices import DEFAULT_SLICE_S
from lit_app import client_build, datasets, disconnect, explain, http_server, layouts, limits, security, security_config
from lit_app.errors import ClientGone
from lit_app.hosts import is_loopback
from lit_app.model_group import make_models
from lit_app.shared_model import DEFAULT_MAX_NEW_TOKENS, SharedLM
from lit_app import inside as inside_models

logger = logging.getLogger("lit_app.server")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5432
# Seconds Ctrl-C waits for cancelled work to stop before the process exits anyway.
SHUTDOWN_GRACE_S = 2.0
PAGE_TITLE = "Sequence Salience"

_ONBOARD_DOC = """
# Sequence Salience

Pick a prompt in the table (or edit one in the editor and click *Add*), then
click any part of the model's output in the Sequence Salience module: the
prompt is coloured by how much each part drove it. Switch granularity (tokens,
words, sentences, lines, paragraphs) to read long prompts; edit the prompt and
rerun. Leave *target* empty to explain the model's own greedy response, or type
the text you want explained.
"""


class _Uncached(lit_caching.CachingModelWrapper):
    """LIT's per-example wrapper without its cache.

    LIT caches every prediction by datapoint id, unbounded; our wrappers keep
    their own caches keyed by content and bounded by bytes (lit_app/shared_model.py),
    and progress polls must reach the model wrapper every time.
    """

    def predict(self, inputs, progress_indicator=None, **kw):
        return self.wrapped.predict(list(inputs), **kw)


class SequenceSalienceApp(lit_app_lib.LitApp):
    """LIT's app with clear messages for malformed prediction requests.

    LIT answers an exception with HTTP 500 and the body
    "Uncaught error: <message>\\n\\nDetails: <traceback>"; its client shows
    <message> when it is one line. LIT's own messages for an unknown model or a
    missing "inputs" key are a bare KeyError ("'foo'"), so they are checked here.
    """

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        for name, wrapper in list(self._models.items()):
            if getattr(wrapper.wrapped, "caches_itself", False):
                self._models[name] = _Uncached(wrapper.wrapped, name)

    def __call__(self, environ, start_response):
        # Long computations ask whether this request's client is still there (lit_app/disconnect.py).
        with disconnect.serving(environ):
            return super().__call__(environ, start_response)

    def _get_preds(self, data, model: str | None = None, requested_types=None, requested_fields=None, **kw):
        if not model:
            raise ValueError('No model named in the request. Fix: add ?model=<name> to /get_preds.')
        if model not in self._models:
            raise ValueError(f"Unknown model {model!r}. Fix: use one of {sorted(self._models)}.")
        inputs = data.get("inputs") if isinstance(data, Mapping) else None
        if not isinstance(inputs, list):
            raise ValueError(
                'The request body must be JSON like {"inputs": [{"id": "...", "data": {"prompt": "..."}}]},'
                " sent as Content-Type application/json (form-encoded bodies are not read)."
            )
        for i, ex in enumerate(inputs):
            if not isinstance(ex, Mapping) or not isinstance(ex.get("data"), Mapping):
                raise ValueError(f'inputs[{i}] has no "data" object. Fix: send {{"id": "...", "data": {{...}}}}.')
        try:
            return super()._get_preds(
                data, model=model, requested_types=requested_types, requested_fields=requested_fields, **kw
            )
        except ClientGone:
            # Nobody reads the answer (the wrapper logged why, in one line): answer nothing
            # rather than have LIT log a traceback for a request the client gave up.
            return []

    def make_handler(self, fn):
        """LIT's handler, with the wrappers' RequestError marked as the client's mistake
        (`security.mark_client_errors`: LIT's 500, which the middleware answers as 400)."""
        return security.mark_client_errors(super().make_handler(fn))

    def example_ids(self, dataset_name: str) -> Collection[str]:
        """Ids of a served dataset's examples (read by lit_app.security.SecureApp)."""
        dataset = self._datasets.get(dataset_name)
        return dataset.index if dataset is not None else ()

    def model_names(self) -> list[str]:
        """Names of the served models (read by lit_app.security.SecureApp)."""
        return list(self._models)

    def dataset_names(self) -> list[str]:
        """Names of the served datasets (read by lit_app.security.SecureApp)."""
        return list(self._datasets)


def model_short_name(model: str) -> str:
    """A LIT model name for a --model value: 'default' -> 'smollm2', org/name -> name, path -> stem."""
    if model == ss.DEFAULT_MODEL:
        return "smollm2"
    base = os.path.basename(os.path.normpath(model))
    if base.endswith(".gguf"):
        base = base[: -len(".gguf")]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", base).strip("_.-")
    return name or "model"


def build_app(
    lit_models: Mapping[str, lit_model.Model],
    lit_datasets: Mapping[str, lit_dataset.Dataset],
    client_root: str | None = None,
    sync_state: bool = False,
) -> SequenceSalienceApp:
    """The LIT WSGI app over our models, datasets, layouts and client root.

    It has no request rules of its own: `main()` serves it through `security.SecureApp`,
    and so does the notebook widget (`lit_app.notebook.LitWidget`). sync_state: LIT's
    notebook UI-state tracking (`/push_ui_state`).
    """
    client_root = client_root or client_build.build_client_root()
    has_module = os.path.isfile(os.path.join(client_root, client_build.BUNDLE_NAME))
    if not has_module:
        logger.warning("No %s in %s: the layouts leave out the Sequence Salience module.",
                       client_build.BUNDLE_NAME, client_root)
    return SequenceSalienceApp(
        models=explain.with_explain_models(lit_models),  # + _<name>_explain (Test this explanation)
        datasets=dict(lit_datasets),
        layouts=layouts.make_layouts(with_salience_module=has_module),
        default_layout=layouts.DEFAULT_LAYOUT,
        dataset_loaders={"jsonl_prompts": (datasets.PromptDataset, datasets.PromptDataset.init_spec())},
        model_loaders={},
        client_root=client_root,
        page_title=PAGE_TITLE,
        onboard_start_doc=_ONBOARD_DOC,
        sync_state=sync_state,
    )


def build_app_for_lm(
    lm: Any,
    model_name: str = "smollm2",
    data_path: str | None = None,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    client_root: str | None = None,
) -> SequenceSalienceApp:
    """Wraps an already-loaded LanguageModel (tests and notebooks use this)."""
    shared = SharedLM(lm, max_new_tokens=max_new_tokens)
    lit_models = inside_models.with_inside(make_models(shared, model_name), shared, model_name)
    return build_app(lit_models, datasets.get_datasets(data_path), client_root)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sequence-salience-server", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=ss.DEFAULT_MODEL,
                   help='HF model id, local folder or .gguf file; "default" is the embedded SmolLM2-135M-Instruct.')
    p.add_argument("--host", default=DEFAULT_HOST, help="Address to serve on (0.0.0.0 to allow other machines).")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="Port to serve on.")
    p.add_argument("--max_new_tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS,
                   help="Longest generated response, in tokens.")
    p.add_argument("--slice_s", type=float, default=DEFAULT_SLICE_S,
                   help="Model time of one background slice, in seconds: clicks wait at most about this long"
                        " for background work (the per-token matrices, explanation tests).")
    p.add_argument("--device", default="cpu", help='"cpu", "cuda", "cuda:N" or "auto".')
    p.add_argument("--dtype", default="float32", help='"float32", "bfloat16" or "float16".')
    p.add_argument("--device_map", default=None,
                   help='Shard the model across devices with accelerate, e.g. "auto" (leave --device at cpu).')
    p.add_argument("--max_memory", default=None,
                   help='With --device_map: per-device budget, e.g. "0=20GiB,1=20GiB,cpu=60GiB".')
    p.add_argument("--data", default=None, help="A .jsonl file of prompts to load besides the shipped examples.")
    p.add_argument("--client_root", default=client_build.DEFAULT_OUTPUT_DIR,
                   help="Where to build the UI's static files (git-ignored).")
    security_config.add_flags(p)
    args = p.parse_args(argv)
    if not args.slice_s > 0:
        p.error(f"--slice_s is {args.slice_s}; use a positive number of seconds, e.g. 0.25.")
    if not 1 <= args.max_new_tokens <= limits.MAX_NEW_TOKENS_CAP:
        p.error(f"--max_new_tokens is {args.max_new_tokens}; use 1 to {limits.MAX_NEW_TOKENS_CAP}.")
    if not 0 < args.port < 65536:
        p.error(f"--port is {args.port}; use 1-65535.")
    security_config.check_flags(p, args)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Starts the server; returns the exit status."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    http_server.cap_malloc_arenas()  # before any thread runs the model
    start = time.perf_counter()

    try:
        lit_datasets = datasets.get_datasets(args.data)
    except datasets.DatasetError as e:
        logger.error("Cannot load --data: %s", e)
        return 2
    client_root = client_build.build_client_root(args.client_root)

    logger.info("Loading model %r on %s (%s) ...", args.model, args.device, args.dtype)
    try:
        lm = ss.load_model(
            args.model, device=args.device, dtype=args.dtype, device_map=args.device_map,
            max_memory=model_lib.parse_max_memory(args.max_memory) if args.max_memory else None, log=logger.info)
    except ss.SalienceError as e:
        logger.error("Cannot load --model %r: %s", args.model, e)
        return 1
    logger.info("Model ready after %.1f s.", time.perf_counter() - start)

    shared = SharedLM(lm, max_new_tokens=args.max_new_tokens, slice_s=args.slice_s)
    name = model_short_name(args.model)
    app = build_app(inside_models.with_inside(make_models(shared, name), shared, name), lit_datasets, client_root)
    sec = security_config.config_from_args(args)
    try:
        httpd = http_server.make_server(args.host, args.port, security.SecureApp(app, sec),
                                        sec.limits.max_connections, sec.limits.max_connections_per_client)
    except OSError as e:
        logger.error("Cannot listen on %s:%d (%s). Fix: pass another --port, or stop the other server.",
                     args.host, args.port, e)
        return 1
    url = sec.browser_url()
    logger.info("Ready after %.1f s. Token: %s; file endpoints: %s.", time.perf_counter() - start,
                "required" if sec.token else "NONE (--no_token)", sec.data_dir or "off (no --data_dir)")
    if sec.token:
        print(f"Sequence Salience is ready: {url}", flush=True)
        print("(Open that URL: it sets a cookie, so the token leaves the address bar. Scripts send"
              " 'Authorization: token <token>'.)", flush=True)
    else:
        print(f"Sequence Salience is ready: {url} WARNING: --no_token: any process or user on this machine can"
              " drive this server.", flush=True)
    if sec.token_generated and not is_loopback(args.host):
        print(f"(--host {args.host} is reachable from other machines: they use this machine's address with"
              " the same ?token=..., or pass --token.)", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` / a service manager: the same clean stop as Ctrl-C
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stop(httpd, shared)
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def stop(httpd: http_server.BoundedThreadedServer, shared: SharedLM, grace_s: float = SHUTDOWN_GRACE_S) -> None:
    """Stops serving and the work in progress, within `grace_s` (+ a fraction of a second).

    Running requests and background jobs are cancelled (their cancel checks read
    `disconnect.shut_down()`; jobs `cancel_all`), so each stops at its next chunk.
    Work still running after `grace_s` (a generation, an explanation test between
    two checks) is not waited for: the process exits at once, without tearing
    torch down under a thread that is inside it.
    """
    start = time.monotonic()
    busy = httpd.serving
    logger.info("Stopping (%d request(s) running): cancelling the work in progress.", busy)
    disconnect.shut_down()
    shared.jobs.cancel_all()
    httpd.server_close()
    while (httpd.serving or not shared.jobs.idle()) and time.monotonic() - start < grace_s:
        time.sleep(0.05)
    if httpd.serving or not shared.jobs.idle():
        logger.warning("Stopped after %.1f s without waiting for %d request(s) still running.",
                       time.monotonic() - start, httpd.serving)
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)  # pylint: disable=protected-access
    logger.info("Stopped after %.1f s.", time.monotonic() - start)


def run() -> None:
    """Console-script entry point (`sequence-salience-server`)."""
    sys.exit(main())


if __name__ == "__main__":
    run()
