"""The Sequence Salience LIT server: one command from a fresh checkout to a working UI.

    python -m lit_app.server [--model default | --models a:default,b:/path/to/folder]
                             [--datasets name:path,... | --data prompts.jsonl] [--max_examples N]
                             [--host 127.0.0.1] [--port 5432] [--max_new_tokens 64]
                             [--device cpu] [--dtype float32 | --precision float32]
                             [--allowed_hosts NAME] [--token T | --no_token] [--data_dir DIR]
                             [--default_layout L] [--page_title T] [--demo_mode] [...]

or the console script `sequence-salience-server` with the same flags. An absl app: it takes
LIT's own server flags and its prompt-debugging server's (--models, --datasets,
--max_examples, --precision) with LIT's meaning, refuses those it cannot honour in one line,
and `--help` lists them all (lit_app/serving/server_flags.py). It checks the data files, builds the
offline client root, loads each model once (logging progress and its memory), then prints
the URL once it accepts connections. Requests are served on threads; each model's access is
serialized by its own lock (lit_app.model.shared_model.SharedLM, one per model:
lit_app/serving/served_models.py). Every request first passes lit_app.edge.security.SecureApp (Host,
token, JSON-only same-origin POSTs, file paths only inside --data_dir, limits, one-line
errors). A token is required on every bind unless --no_token (loopback only): the printed
URL carries it.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from absl import app as absl_app
from absl import flags as absl_flags
from absl import logging as absl_logging
from lit_nlp import app as lit_app_lib
from lit_nlp.lib import caching as lit_caching
from lit_nlp.api import dataset as lit_dataset
from lit_nlp.api import model as lit_model

import sequence_salience as ss
from sequence_salience import model as model_lib
from sequence_salience.ablation import AblationConfig
from lit_app.serving import client_build, layouts, served_models, server_flags
from lit_app.edge import clients, disconnect, http_server, security, security_config, lit_components
from lit_app.data import datasets
from lit_app import memory
from lit_app.schema import method_registry
from lit_app.wrappers import wrapper as wrapper_lib
from lit_app.errors import Cancelled, ClientGone, ServerStopping
from lit_app.edge.hosts import is_loopback
from lit_app.schema.method_registry import EXTRA_METHODS
from lit_app.model.shared_model import SharedLM

logger = logging.getLogger("lit_app.server")

# Seconds Ctrl-C waits for cancelled work to stop before the process exits anyway.
SHUTDOWN_GRACE_S = 2.0
# From Ctrl-C / SIGTERM to the process gone. A stop that takes longer is a hang (a thread that ignores
# its cancel, a native thread pool at exit): every thread's stack is printed and the process exits 1.
EXIT_DEADLINE_S = 20.0
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
    their own caches keyed by content and bounded by bytes (lit_app/model/shared_model.py),
    and progress polls must reach the model wrapper every time.
    """

    def predict(self, inputs, progress_indicator=None, **kw):
        return self.wrapped.predict(list(inputs), **kw)


# Datapoints LIT keeps for /post_new_data (in memory until /remove_new_data, which a client may never
# send): the newest are kept up to this count and these bytes of JSON together; older ids answer 404.
MAX_SAVED_DATAPOINTS = 32
MAX_SAVED_DATAPOINTS_BYTES = 32 * 1024**2


class SequenceSalienceApp(lit_app_lib.LitApp):
    """LIT's app with clear messages for malformed prediction requests.

    LIT answers an exception with HTTP 500 and the body
    "Uncaught error: <message>\\n\\nDetails: <traceback>"; its client shows
    <message> when it is one line. LIT's own messages for an unknown model or a
    missing "inputs" key are a bare KeyError ("'foo'"), so they are checked here.
    """

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._saved_sizes: dict[str, int] = {}  # saved-datapoints id -> bytes of its JSON, measured once
        for name, wrapper in list(self._models.items()):
            if getattr(wrapper.wrapped, "caches_itself", False):
                self._models[name] = _Uncached(wrapper.wrapped, name)

    def publish_limits(self, limits: Any) -> None:
        """Publishes the request limits the browser checks before it sends (`limits.Limits`; called by
        `security.SecureApp`): /get_info's "requestLimits" ({"max_prompt_chars": ..., "max_counts": {count
        field: the server's --max_<field>}}; the datapoint editor refuses a row the server would refuse:
        frontend/src/lit_fixes/datapoint_editor.ts `editorRefusal`; the count fields take no more than the
        server's maximum: frontend/src/shared/methods.ts `withCountLimits`; "pattern": the bounds of a regex pattern,
        sequence_salience/aggregate/patterns.py PATTERN_BOUNDS, that the page checks before it sends one:
        frontend/src/shared/aggregate/pattern.ts `checkPattern`)."""
        self._request_limits = {"max_prompt_chars": int(limits.max_prompt_chars),
                                "max_counts": {e.field: int(getattr(limits, e.limit)) for e in EXTRA_METHODS},
                                "pattern": ss.aggregate.PATTERN_BOUNDS.as_json()}
        self._info = self._build_metadata()

    def _build_metadata(self):
        info = super()._build_metadata()
        limits = getattr(self, "_request_limits", None)
        if limits is not None:
            info["requestLimits"] = dict(limits)
        return info

    def __call__(self, environ, start_response):
        # Long computations ask whether this request's client is still there (lit_app/edge/disconnect.py).
        # Work belongs to the client that asked (lit_app/edge/clients.py).
        with disconnect.serving(environ), clients.serving(environ):
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
        except Cancelled as e:
            if disconnect.stopping():  # cancelled by the server's stop, not by its client: say so, never 200 []
                raise ServerStopping() from None
            if isinstance(e, ClientGone):
                # Nobody reads the answer (the wrapper logged why, in one line): answer nothing
                # rather than have LIT log a traceback for a request the client gave up.
                return []
            raise

    def _get_interpretations(self, data, model: str | None = None, interpreter: str | None = None, **kw):
        """LIT's, with a failure inside LIT's interpreter (a config it cannot use) a 400 naming it
        (lit_app/edge/lit_components.py). A missing or unknown name keeps LIT's own message (lit_routes.py)."""
        def call():
            return super(SequenceSalienceApp, self)._get_interpretations(data, model=model, interpreter=interpreter,
                                                                          **kw)
        if not (model and kw.get("dataset_name") and interpreter in self._interpreters):
            return call()
        config = data.get("config") if isinstance(data, Mapping) else None
        return lit_components.component_call("interpreter", interpreter, model, config, call)

    def _get_generated(self, data, model: str | None = None, generator: str | None = None, **kw):
        """LIT's, with a failure inside LIT's generator (a config it cannot use) a 400 naming it."""
        config = data.get("config") if isinstance(data, Mapping) else None
        def call():
            return super(SequenceSalienceApp, self)._get_generated(data, model=model, generator=generator, **kw)
        if not (model and kw.get("dataset_name") and generator in self._generators):
            return call()
        return lit_components.component_call("generator", generator, model, config, call)

    def _save_datapoints(self, data, path: str | None = None, **kw):
        """LIT's, with a file it cannot write (a missing folder, a name too long) a 400 naming ?path=."""
        return lit_components.file_call("/save_datapoints", path, lambda: super(
            SequenceSalienceApp, self)._save_datapoints(data, path=path, **kw))

    def _load_datapoints(self, data, path: str | None = None, **kw):
        """LIT's, with a file it cannot read (a missing .lit.jsonl) a 400 naming ?path=."""
        return lit_components.file_call("/load_datapoints", path, lambda: super(
            SequenceSalienceApp, self)._load_datapoints(data, path=path, **kw))

    def _post_new_data(self, data, dataset_name: str | None = None, **kw):
        """LIT's, with the saved datapoints bounded (MAX_SAVED_DATAPOINTS, MAX_SAVED_DATAPOINTS_BYTES): LIT
        kept every POST until its id was removed, so a client could grow the server without bound."""
        answer = super()._post_new_data(data, dataset_name=dataset_name, **kw)
        sizes = self._saved_sizes
        with self._saved_datapoints_lock:
            saved = self._saved_datapoints  # LIT 1.3.1: {id: annotated inputs}, oldest first
            for key in set(sizes) - set(saved):  # removed by /remove_new_data
                del sizes[key]
            for key, value in saved.items():
                if key not in sizes:
                    sizes[key] = len(json.dumps(value, default=str))
            total = sum(sizes.values())
            for key in list(saved)[:-1]:  # never the one just saved
                if len(saved) <= MAX_SAVED_DATAPOINTS and total <= MAX_SAVED_DATAPOINTS_BYTES:
                    break
                total -= sizes.pop(key)
                del saved[key]
        return answer

    def make_handler(self, fn):
        """LIT's handler, with the wrappers' RequestError marked as the client's mistake
        (`security.mark_client_errors`: LIT's 500, which the middleware answers as 400)."""
        return security.mark_client_errors(super().make_handler(fn))

    def example_ids(self, dataset_name: str) -> Collection[str]:
        """Ids of a served dataset's examples (read by lit_app.edge.security.SecureApp)."""
        dataset = self._datasets.get(dataset_name)
        return dataset.index if dataset is not None else ()

    def model_names(self) -> list[str]:
        """Names of the served models (read by lit_app.edge.security.SecureApp)."""
        return list(self._models)

    def model_free_names(self) -> list[str]:
        """Names of the served models that never wait for the loaded model (read by lit_app.edge.security.SecureApp)."""
        return [name for name, model in self._models.items() if not wrapper_lib.needs_model(model)]

    def dataset_names(self) -> list[str]:
        """Names of the served datasets (read by lit_app.edge.security.SecureApp)."""
        return list(self._datasets)


# A LIT model name for a --model value ('default' -> 'smollm2', org/name -> name, path -> stem).
model_short_name = server_flags.model_short_name


def build_app(
    lit_models: Mapping[str, lit_model.Model],
    lit_datasets: Mapping[str, lit_dataset.Dataset],
    client_root: str | None = None,
    sync_state: bool = False,
    **lit_kwargs: Any,
) -> SequenceSalienceApp:
    """The LIT WSGI app over our models (a map from `model_group.lit_models`), datasets, layouts and client root.

    It has no request rules of its own: `main()` serves it through `security.SecureApp`,
    and so does the notebook widget (`lit_app.notebook.LitWidget`). sync_state: LIT's
    notebook UI-state tracking (`/push_ui_state`). lit_kwargs: LitApp arguments that LIT's
    server flags set (`server_flags.parse(...).lit_app_kwargs`: default_layout, page_title,
    demo_mode, canonical_url, development_demo, strict_cache_id_validation).
    """
    options = {"default_layout": layouts.DEFAULT_LAYOUT, "page_title": PAGE_TITLE}
    options.update({k: v for k, v in lit_kwargs.items() if v is not None})
    client_root = client_root or client_build.build_client_root()
    has_module = os.path.isfile(os.path.join(client_root, client_build.BUNDLE_NAME))
    if not has_module:
        logger.warning("No %s in %s: the layouts leave out the Sequence Salience module.",
                       client_build.BUNDLE_NAME, client_root)
    return SequenceSalienceApp(
        models=dict(lit_models),
        datasets=dict(lit_datasets),
        layouts=layouts.make_layouts(with_salience_module=has_module),
        dataset_loaders={"jsonl_prompts": (datasets.PromptDataset, datasets.PromptDataset.init_spec())},
        model_loaders={},
        client_root=client_root,
        onboard_start_doc=_ONBOARD_DOC,
        sync_state=sync_state,
        **options,
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The parsed command line (lit_app/serving/server_flags.py); --help prints every flag and exits 0,
    a bad flag prints one line naming it and exits 2 (argparse's convention)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in server_flags.HELP_ARGS for a in argv):
        print(server_flags.help_text())
        raise SystemExit(0)
    try:
        return server_flags.parse(argv)
    except server_flags.FlagError as e:
        print(f"{server_flags.PROG}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Starts the server; returns the exit status."""
    logging.root.removeHandler(absl_logging.get_absl_handler())  # absl.app.run installs it: keep our format
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = argv if isinstance(argv, argparse.Namespace) else parse_args(argv)
    memory.cap_malloc_arenas()  # before any thread runs the model
    start = time.perf_counter()
    try:
        lit_datasets, client_root, served = _load(args, start)
        app = build_app(served_models.lit_model_map(served), lit_datasets, client_root, **args.lit_app_kwargs)
        sec = security_config.config_from_args(args)
        shared = [m.shared for m in served]
        memory.freeze_startup_objects()  # the collector's full passes then scan only what requests create
        httpd = listen(args, security.SecureApp(app, sec), sec)
    except StartFailed as e:
        return e.status
    _serve(httpd, args, sec, shared, start)
    return 0


class StartFailed(Exception):
    """A startup step failed; it logged the cause and the fix. `status`: the process's exit status."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


def _load(args: argparse.Namespace, start: float
          ) -> tuple[dict[str, lit_dataset.Dataset], str, list[served_models.ServedModel]]:
    """The datasets, the client root and the served models, warm-started with --warm_start.

    Raises StartFailed: 2 for a dataset or a flagged setting it cannot use, 1 for a model it cannot load."""
    try:
        lit_datasets = datasets.load_datasets(args.datasets, args.data, args.max_examples)
    except datasets.DatasetError as e:
        logger.error("Cannot load %s: %s", "--datasets" if args.datasets else "--data", e)
        raise StartFailed(2) from None
    client_root = client_build.build_client_root(args.client_root)
    served = _load_models(args, start)
    if args.warm_start > 0:
        logger.info("Warm start (--warm_start %g): generating ...", args.warm_start)
        n = served_models.warm_start(served, lit_datasets, args.warm_start)
        logger.info("Warm start done: %d generation(s) after %.1f s.", n, time.perf_counter() - start)
    return lit_datasets, client_root, served


def _load_models(args: argparse.Namespace, start: float) -> list[served_models.ServedModel]:
    """Each --model(s) entry loaded once on --device, with its shared model (lit_app/model/shared_model.py)."""
    max_memory = model_lib.parse_max_memory(args.max_memory) if args.max_memory else None

    def load(spec: str) -> ss.LanguageModel:
        return ss.load_model(spec, device=args.device, dtype=args.dtype, device_map=args.device_map,
                             max_memory=max_memory, log=logger.info)

    try:  # the segment methods' flagged settings (--attention_estimator), each checked by its record
        ablation = AblationConfig(**method_registry.server_ablation_settings(vars(args)))
    except ss.SalienceError as e:
        logger.error("Cannot use %s", e)
        raise StartFailed(2) from None

    def make_shared(lm: ss.LanguageModel) -> SharedLM:
        return SharedLM(lm, max_new_tokens=args.max_new_tokens, slice_s=args.slice_s,
                         heartbeat_s=args.job_heartbeat_s, ablation_config=ablation)

    logger.info("Loading %d model(s) on %s (%s) ...", len(args.models), args.device, args.dtype)
    try:
        served = served_models.load_served_models(args.models, load, make_shared)
    except ss.SalienceError as e:
        logger.error("Cannot load a model of %s: %s", "--models" if len(args.models) > 1 else "--model", e)
        raise StartFailed(1) from None
    logger.info("Model(s) ready after %.1f s: %s.", time.perf_counter() - start, served_models.describe(served))
    return served


def listen(args: argparse.Namespace, wsgi_app: Any, sec: security_config.SecurityConfig
           ) -> http_server.BoundedThreadedServer:
    """The HTTP server bound to --host:--port (not serving yet). StartFailed(1) when it cannot bind (a port in
    use, an address not on this machine), after one log line naming the cause and the flag that fixes it."""
    try:
        return http_server.make_server(args.host, args.port, wsgi_app,
                                       sec.limits.max_connections, sec.limits.max_connections_per_client)
    except http_server.CannotListen as e:
        if e.in_use:
            logger.error("Cannot listen on %s:%d: port %d is in use by another program. Fix: pass another --port"
                         " (e.g. --port %d), or stop the program holding port %d.",
                         args.host, args.port, args.port, args.port + 1, args.port)
        else:
            logger.error("Cannot listen on %s:%d (%s). Fix: pass a --host of this machine (e.g. --host 127.0.0.1)"
                         " or another --port.", args.host, args.port, e.reason)
        raise StartFailed(1) from None
    except OSError as e:
        logger.error("Cannot listen on %s:%d (%s). Fix: pass another --host or --port.", args.host, args.port, e)
        raise StartFailed(1) from None


def _serve(httpd: http_server.BoundedThreadedServer, args: argparse.Namespace,
           sec: security_config.SecurityConfig, shared: list[SharedLM], start: float) -> None:
    """Serves until SIGINT or SIGTERM, then stops the work in progress (stop())."""
    try:  # from here a signal (SIGTERM as KeyboardInterrupt) ends in stop()
        # Before the ready line: whoever reads it may signal at once.
        signal.signal(signal.SIGTERM, _interrupt)  # `kill` / a service manager: the same clean stop as Ctrl-C
        if hasattr(signal, "SIGUSR1"):  # `kill -USR1 <pid>`: every thread's stack into the log (a stuck server)
            faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
        warn_if_sigint_ignored()
        _announce(args, sec, start)
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        # Armed for the rest of the process: the exit after stop() (atexit, interpreter teardown) is covered.
        faulthandler.dump_traceback_later(EXIT_DEADLINE_S, file=sys.stderr, exit=True)
        stop(httpd, shared)


def _announce(args: argparse.Namespace, sec: security_config.SecurityConfig, start: float) -> None:
    """The ready line in the log and the URL to open on stdout (with the token, or a warning without one)."""
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


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def warn_if_sigint_ignored() -> None:
    """Logs how to stop this process when it inherited SIGINT ignored (a script's background job:
    Python then never raises KeyboardInterrupt, so Ctrl-C does nothing)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        logger.warning("Ctrl-C (SIGINT) is ignored in this process (it was started in the background). "
                       "Fix: stop it with `kill %d` (SIGTERM: the same clean stop).", os.getpid())


def stop(httpd: http_server.BoundedThreadedServer, shared: SharedLM | Sequence[SharedLM],
         grace_s: float = SHUTDOWN_GRACE_S) -> None:
    """Stops serving and the work in progress, within `grace_s` (+ a fraction of a second).

    Running requests and background jobs are cancelled (their cancel checks read
    `disconnect.shut_down()`; jobs `cancel_all`), so each stops at its next chunk.
    Work still running after `grace_s` (a generation, an explanation test between
    two checks) is not waited for: the process exits at once, without tearing
    torch down under a thread that is inside it.
    """
    start = time.monotonic()
    every = [shared] if isinstance(shared, SharedLM) else list(shared)
    busy = httpd.serving
    logger.info("Stopping (%d request(s) running): cancelling the work in progress.", busy)
    disconnect.shut_down()
    for one in every:
        one.jobs.cancel_all()
    httpd.server_close()

    def idle() -> bool:
        return all(one.jobs.idle() for one in every)

    while (httpd.serving or not idle()) and time.monotonic() - start < grace_s:
        time.sleep(0.05)
    if httpd.serving or not idle():
        logger.warning("Stopped after %.1f s without waiting for %d request(s) still running.",
                       time.monotonic() - start, httpd.serving)
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)  # pylint: disable=protected-access
    logger.info("Stopped after %.1f s.", time.monotonic() - start)


def run() -> None:
    """Console-script entry point (`sequence-salience-server`): an absl app over our own flag parser."""
    absl_app.run(lambda args: sys.exit(main(args)), flags_parser=_absl_flags_parser)


def _absl_flags_parser(argv: Sequence[str]) -> argparse.Namespace:
    """absl.app.run's flags_parser: ours parse (their own FlagValues); absl's global flags keep defaults."""
    args = parse_args(argv[1:])
    absl_flags.FLAGS.mark_as_parsed()
    return args


if __name__ == "__main__":
    run()
