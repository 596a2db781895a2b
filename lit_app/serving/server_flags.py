"""The server's command line: our flags and LIT's, parsed with absl the way LIT's servers take them.

LIT's standard server flags (`lit_nlp/server_flags.py`: --port, --host, --data_dir,
--default_layout, --page_title, --demo_mode, --warm_start, ...) and its prompt-debugging
server's flags (`lit_nlp/examples/prompt_debugging/server.py`: --models name:path,...,
--datasets name:path,..., --max_examples, --precision, --batch_size, ...) are accepted with
LIT's meaning. Those this server cannot honour are refused with a one-line reason
(`REFUSED`), never silently ignored. Our own flags (--model, --data, --max_new_tokens,
--device, --dtype, the security and limit flags of lit_app/edge/security_config.py, ...) keep
working as before.

The flags live in a `FlagValues` of their own (not absl's global `FLAGS`), so importing the
server next to LIT's own demos never clashes, and `parse_args` can run many times (tests).
`parse_args` returns an `argparse.Namespace` with one attribute per flag plus the parsed
`models` [(name, spec)] and `datasets` [(name, path)] lists and `lit_app_kwargs` (the LitApp
keyword arguments LIT's flags set).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from absl import flags
from lit_nlp import server_flags as lit_server_flags

import sequence_salience as ss
from sequence_salience import field_rules
from sequence_salience.slices import DEFAULT_SLICE_S
from lit_app.serving import client_build, layouts
from lit_app.data import datasets
from lit_app.edge import limits, security_config
from lit_app.schema import method_registry
from lit_app.model import progressive
from lit_app.model.shared_model import DEFAULT_MAX_NEW_TOKENS

PROG = "sequence-salience-server"
# Module labels under which --help groups the flags.
OURS = "sequence salience (lit_app/serving/server_flags.py)"
LIT_SERVER = "LIT's server flags (lit_nlp/server_flags.py)"
LIT_PROMPT_DEBUGGING = "LIT's prompt-debugging server flags (lit_nlp/examples/prompt_debugging/server.py)"
# absl's logging flags that LIT's documented command lines pass; our logs already go to stderr.
LOGGING_NO_OPS = ("alsologtostderr", "logtostderr")
DEFAULT_MAX_EXAMPLES = 1000  # LIT's prompt-debugging default (datasets.DEFAULT_MAX_EXAMPLES there)
HELP_ARGS = ("--help", "-h", "--helpfull", "--helpshort", "-?")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class FlagError(ValueError):
    """A bad command line; the one-line message names the flag, the cause and the fix."""


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A LIT flag we accept only with the values in `accepted` (a predicate on the value)."""

    accepted: Callable[[Any], bool]
    reason: str


# LIT flags this server does not honour, with the values it does (their defaults) and why.
REFUSED: dict[str, Refusal] = {
    "server_type": Refusal(lambda v: v == "default",
                           "this server runs its own secured WSGI server; to host the app elsewhere, wrap"
                           " lit_app.server.build_app(...) in lit_app.edge.security.SecureApp in your WSGI server"),
    "warm_projections": Refusal(lambda v: not v, "this server's models have no embeddings to project"),
    "validate": Refusal(lambda v: v is None or getattr(v, "value", v) == "off",
                        "validating model outputs runs every model on every example at start;"
                        " the datasets are checked line by line when they load"),
    "batch_size": Refusal(lambda v: v is None,
                          "each example is one model call here (salience needs one backward pass per"
                          " example); drop the flag"),
    "dl_framework": Refusal(lambda v: v == "transformers",
                            "models load with Hugging Face transformers (or a .gguf file) here; KerasNLP"
                            " is not supported"),
    "dl_runtime": Refusal(lambda v: v == "torch", "models run on PyTorch here"),
    "sequence_length": Refusal(lambda v: v is None,
                               "the response length is --max_new_tokens and the prompt length"
                               " --max_prompt_chars here"),
}


def _define_lit_server_flags(fv: flags.FlagValues) -> None:
    """LIT's own server flags (copied from lit_nlp.server_flags: same names, types, help)."""
    for name in lit_server_flags.get_flag_holders():
        flag = copy.deepcopy(flags.FLAGS[name])
        fv[name] = flag
        fv.register_flag_by_module(LIT_SERVER, flag)
    # Where our meaning or default differs, say so in --help.
    notes = {
        "data_dir": "Here: the one folder LIT's save/load-datapoints and new-dataset dialogs may use"
                    " (those endpoints are off without it); predictions are not cached on disk (the"
                    " wrappers keep bounded caches in memory, generations under the library's cache dir).",
        "client_root": "Here: where the UI's static files are built (git-ignored).",
        "warm_start": "Here: the generation models' greedy responses (salience is computed on request).",
        "default_layout": f"Here: one of {sorted(layouts.make_layouts())}.",
    }
    for name, note in notes.items():
        fv[name].help = f"{fv[name].help.rstrip('.')}. {note}"
    for name, refusal in REFUSED.items():
        if name in fv:
            fv[name].help = f"{fv[name].help} Not supported here: {refusal.reason}."
    fv.set_default("client_root", client_build.DEFAULT_OUTPUT_DIR)
    fv.set_default("default_layout", layouts.DEFAULT_LAYOUT)
    fv.set_default("page_title", "Sequence Salience")


def _define_prompt_debugging_flags(fv: flags.FlagValues) -> None:
    """The prompt-debugging server's flags (that module loads Keras, so they are restated here)."""
    defs = [
        flags.DEFINE_list(
            "models", None,
            "Models to load, as <name>:<path>,... (LIT's form); <path> is anything --model takes"
            ' ("default", a local folder, a .gguf file, a Hub id). A bare <path> is named as --model'
            " names it. Each is loaded once, with its own model lock and caches.", flag_values=fv),
        flags.DEFINE_list(
            "datasets", None,
            "Datasets to load, as <name>:<path>,... Format: .jsonl where each record has 'prompt' and"
            " optional 'target' and 'source' fields (LIT's; ours adds 'system' and 'case'), or a plain"
            " .txt file with one prompt per line. 'sample_prompts' is LIT's sample file and"
            f" '{datasets.CASE_STUDIES_NAME}' our case studies (one row per case),"
            f" '{datasets.VARIANTS_NAME}' their variants. Default: those two (+ --data).",
            flag_values=fv),
        flags.DEFINE_integer(
            "max_examples", DEFAULT_MAX_EXAMPLES,
            "Maximum number of examples to load from each dataset.", lower_bound=1, flag_values=fv),
        flags.DEFINE_enum(
            "precision", None, ("bfloat16", "float32"),
            "Floating point precision for the models (the same as --dtype; default: --dtype's).",
            flag_values=fv),
        flags.DEFINE_integer("batch_size", None, "The number of examples to process per batch.", flag_values=fv),
        flags.DEFINE_enum("dl_framework", "transformers", ("kerasnlp", "transformers"),
                          "The deep learning framework that loads and runs the model.", flag_values=fv),
        flags.DEFINE_enum("dl_runtime", "torch", ("tensorflow", "torch"),
                          "The deep learning backend framework that the model runs on.", flag_values=fv),
        flags.DEFINE_integer("sequence_length", None,
                             "The maximum sequence length of the input prompt + generated text.", flag_values=fv),
    ]
    for holder in defs:
        flag = fv[holder.name]
        if holder.name in REFUSED:
            flag.help = f"{flag.help} Not supported here: {REFUSED[holder.name].reason}."
        fv.register_flag_by_module(LIT_PROMPT_DEBUGGING, flag)


def _define_our_flags(fv: flags.FlagValues) -> None:
    ours = [
        flags.DEFINE_string(
            "model", None,
            'One model (the shortcut for --models): HF model id, local folder or .gguf file; "default" is'
            " the embedded SmolLM2-135M-Instruct (the default when neither flag is given).", flag_values=fv),
        flags.DEFINE_integer("max_new_tokens", DEFAULT_MAX_NEW_TOKENS,
                             "Longest generated response, in tokens: it caps every row's own budget (a row's"
                             " max_new_tokens, e.g. the shipped chain-of-thought row's 192); rows without one get"
                             f" {int(field_rules.MAX_NEW_TOKENS.default)} (or this, if lower).", flag_values=fv),
        flags.DEFINE_float("slice_s", DEFAULT_SLICE_S,
                           "Model time of one background slice, in seconds: clicks wait at most about this long"
                           " for background work (the per-token matrices, explanation tests).", flag_values=fv),
        flags.DEFINE_float("job_heartbeat_s", progressive.DEFAULT_HEARTBEAT_S,
                           "A background matrix job nobody polls for this many seconds is abandoned (the page"
                           " was closed) and stops within one slice.", flag_values=fv),
        flags.DEFINE_string("device", "cpu", '"cpu", "cuda", "cuda:N" or "auto".', flag_values=fv),
        flags.DEFINE_string("dtype", "float32", '"float32", "bfloat16" or "float16".', flag_values=fv),
        flags.DEFINE_string("device_map", None,
                            'Shard each model across devices with accelerate, e.g. "auto" (leave --device at cpu).',
                            flag_values=fv),
        flags.DEFINE_string("max_memory", None,
                            'With --device_map: per-device budget, e.g. "0=20GiB,1=20GiB,cpu=60GiB".', flag_values=fv),
        flags.DEFINE_string("data", None, "A .jsonl file of prompts to load besides the shipped examples"
                            " (the one-file shortcut for --datasets).", flag_values=fv),
        # The segment methods' flagged settings (--attention_estimator), from their records.
        *({float: flags.DEFINE_float, int: flags.DEFINE_integer}.get(s.type, flags.DEFINE_string)(
            s.name, s.default, s.help, flag_values=fv) for s in method_registry.SERVER_SETTINGS),
    ]
    for name in LOGGING_NO_OPS:
        ours.append(flags.DEFINE_bool(name, False, "Accepted for LIT's command lines; logs go to stderr anyway.",
                                      flag_values=fv))
    for holder in ours:
        fv.register_flag_by_module(OURS, fv[holder.name])
    security_config.define_flags(fv)


def make_flag_values() -> flags.FlagValues:
    """A fresh FlagValues with every flag the server takes (ours and LIT's)."""
    fv = flags.FlagValues()
    _define_lit_server_flags(fv)
    _define_prompt_debugging_flags(fv)
    _define_our_flags(fv)
    return fv


def help_text(fv: flags.FlagValues | None = None) -> str:
    fv = fv or make_flag_values()
    usage = (f"usage: {PROG} [--model default | --models name:path,...] [--datasets name:path,...]"
             " [--port 5432] [...]\n\nThe Sequence Salience LIT server. Flags (--flag value or --flag=value;"
             " --flagfile FILE reads more):\n")
    return usage + fv.get_help()


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


def parse_models(values: Sequence[str], flag: str = "--models") -> list[tuple[str, str]]:
    """[(name, spec)] of `--models` entries `name:path` or a bare `path` (named by `model_short_name`)."""
    out: list[tuple[str, str]] = []
    for entry in values:
        entry = entry.strip()
        if not entry:
            raise FlagError(f"{flag} has an empty entry. Fix: write name:path,name:path (e.g. a:default,b:/models/b).")
        name, sep, spec = entry.partition(":")
        if not sep or not _NAME.fullmatch(name) or not spec or spec.startswith("//"):
            name, spec = model_short_name(entry), entry  # a bare path (or a URL-like spec)
        if not spec.strip():
            raise FlagError(f"{flag} entry {entry!r} has no path. Fix: write name:path, e.g. a:default.")
        if any(name == n for n, _ in out):
            raise FlagError(f"{flag} names the model {name!r} twice. Fix: give each entry its own name:path.")
        out.append((name, spec))
    if not out:
        raise FlagError(f"{flag} is empty. Fix: name at least one model, e.g. {flag} a:default.")
    return out


def parse_datasets(values: Sequence[str]) -> list[tuple[str, str]]:
    """[(name, path)] of `--datasets` entries: `name:path`, a bare path (named by its stem), or a builtin name."""
    out: list[tuple[str, str]] = []
    for entry in values:
        entry = entry.strip()
        if entry in datasets.BUILTIN_PATHS:
            name, path = entry, datasets.BUILTIN_PATHS[entry]
        else:
            name, sep, path = entry.partition(":")
            if not sep or not _NAME.fullmatch(name) or not path:
                path = entry
                name = re.sub(r"[^A-Za-z0-9_.-]+", "_", os.path.splitext(os.path.basename(entry))[0]).strip("_.-")
        if not path or not name:
            raise FlagError(f"--datasets entry {entry!r} is not name:path. Fix: e.g. --datasets mine:prompts.jsonl.")
        if any(name == n for n, _ in out):
            raise FlagError(f"--datasets names the dataset {name!r} twice. Fix: give each entry its own name.")
        out.append((name, path))
    return out


def model_short_name(model: str) -> str:
    """A LIT model name for a --model value: 'default' -> 'smollm2', org/name -> name, path -> stem."""
    if model == ss.DEFAULT_MODEL:
        return "smollm2"
    base = os.path.basename(os.path.normpath(model))
    if base.endswith(".gguf"):
        base = base[: -len(".gguf")]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", base).strip("_.-")
    return name or "model"


def _check(fv: flags.FlagValues) -> argparse.Namespace:
    for name, refusal in REFUSED.items():
        if fv[name].present and not refusal.accepted(fv[name].value):
            raise FlagError(f"{fv[name].serialize()} is not supported: {refusal.reason}.")
    if not 0 <= fv.warm_start <= 1:
        raise FlagError(f"--warm_start is {fv.warm_start}; use a fraction from 0 to 1 (1: every example).")
    if not fv.slice_s > 0:
        raise FlagError(f"--slice_s is {fv.slice_s}; use a positive number of seconds, e.g. 0.25.")
    if not fv.job_heartbeat_s > 0:
        raise FlagError(f"--job_heartbeat_s is {fv.job_heartbeat_s}; use a positive number of seconds, e.g. 30.")
    if not 1 <= fv.max_new_tokens <= limits.MAX_NEW_TOKENS_CAP:
        raise FlagError(f"--max_new_tokens is {fv.max_new_tokens}; use 1 to {limits.MAX_NEW_TOKENS_CAP}.")
    if not 0 < fv.port < 65536:
        raise FlagError(f"--port is {fv.port}; use 1-65535.")
    dtype = fv.dtype
    if fv["precision"].present:
        if fv["dtype"].present and fv.dtype != fv.precision:
            raise FlagError(f"--precision {fv.precision} and --dtype {fv.dtype} contradict each other; pass one.")
        dtype = fv.precision
    if fv["model"].present and fv["models"].present:
        raise FlagError("--model and --models both name models; pass one (--model X is --models X).")
    if fv["models"].present:
        models = parse_models(fv.models)
    else:
        spec = fv.model or ss.DEFAULT_MODEL
        models = [(model_short_name(spec), spec)]
    dataset_specs = parse_datasets(fv.datasets) if fv["datasets"].present else []
    layout_names = sorted(layouts.make_layouts())
    if fv.default_layout not in layout_names:
        raise FlagError(f"--default_layout {fv.default_layout!r} is not a layout of this server. Fix: use one of"
                        f" {layout_names}.")
    values = {name: fv[name].value for name in fv}
    values.update(dtype=dtype, models=models, datasets=dataset_specs)
    values["lit_app_kwargs"] = {
        "demo_mode": fv.demo_mode,
        "default_layout": fv.default_layout,
        "canonical_url": fv.canonical_url,
        "page_title": fv.page_title,
        "development_demo": fv.development_demo,
        "strict_cache_id_validation": fv.strict_cache_id_validation,
    }
    args = argparse.Namespace(**values)
    args.data_dir = args.data_dir or None  # LIT's default is ""
    try:
        security_config.config_from_args(args)
    except ValueError as e:
        raise FlagError(_one_line(e)) from None
    return args


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The parsed command line (without the program name); FlagError on a bad one."""
    fv = make_flag_values()
    try:
        rest = fv([PROG, *argv])
    except flags.Error as e:
        raise FlagError(f"{_one_line(e)}. Fix: see {PROG} --help.") from None
    if len(rest) > 1:
        raise FlagError(f"unexpected argument {rest[1]!r}: every option is a --flag (see {PROG} --help).")
    return _check(fv)
