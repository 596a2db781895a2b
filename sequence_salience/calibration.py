"""Calibration: fit a model's attention estimator on its own ablations of generated prompts.

    generated prompts (attention/prompts.py, split "train")
      -> per prompt: exact leave one segment out + seeded random-mask ablations (sequence_salience.ablation)
         and the attention features (attention/features.py), cached as OUT/prompts/<id>.npz
      -> the ridge fit over every cached prompt (attention/estimator.py) -> OUT/estimator.npz

Resumable: a prompt whose cache file holds the same inputs (prompt, target, granularity, removal, masks) is
not recomputed. Reproducible: the prompts, their segmentation and the masks follow from the seed, the forwards
are deterministic on a CPU, and the fit is closed-form, so the same seed gives the same weights.
"""

from __future__ import annotations

import dataclasses
import io
import json
import pathlib
import time
from collections.abc import Callable

import numpy as np

from sequence_salience.ablation import segment_salience
from sequence_salience.attention.estimator import (ALPHAS, DEFAULT_FEATURES, Estimator, PromptAblations, fit_weights,
                                                   load_estimator, training_hash)
from sequence_salience.attention.features import attention_shape, capture_feature_sets, span_rows
from sequence_salience.attention.prompts import GeneratedPrompt, generate_prompts
from sequence_salience.errors import SalienceError
from sequence_salience.files import atomic_write_bytes
from sequence_salience.methods.base import AblationConfig
from sequence_salience.model import LanguageModel
from sequence_salience.text import ChatPrompt

ESTIMATOR_FILE = "estimator.npz"
PROMPTS_DIR = "prompts"


@dataclasses.dataclass(frozen=True)
class CalibrationConfig:
    """The recipe of a calibration; one frozen value, saved in the estimator file. The defaults are the recipe of
    the estimator shipped for the default model (short prompts: leave-one-out costs grow with the square of the
    length, and the shipped fit had to run in about 20 minutes on a shared 2-core CPU).

    Attributes:
      prompts: training prompts generated (split "train"; the kinds cycle).
      min_tokens, max_tokens: their length, drawn log-uniformly (the model's tokens of user + system text).
      sentence_max_tokens: prompts up to this long are segmented by sentence, longer ones by paragraph
        (principles: by line, one principle a line), so that leave-one-out stays within ~30 forwards a prompt.
      masks: random ablations per prompt besides leave-one-out (each keeps a segment with probability 1/2).
      removal: how a segment is removed ("filler" or "delete", as AblationConfig).
      seed: of the prompts and the masks.
      alphas: the ridge weights tried by cross-validation.
      features: the feature blocks the estimator reads (attention/estimator.py FEATURE_BLOCKS).
    """

    prompts: int = 40
    min_tokens: int = 60
    max_tokens: int = 220
    sentence_max_tokens: int = 150
    masks: int = 4
    removal: str = "filler"
    seed: int = 0
    alphas: tuple[float, ...] = ALPHAS
    features: tuple[str, ...] = DEFAULT_FEATURES

    def recipe(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


@dataclasses.dataclass(frozen=True)
class PromptRecord:
    """One calibration prompt's cache: what was asked (spec), the ablations and features, and the seconds spent."""

    spec: dict
    data: PromptAblations
    seconds: float


def chat_prompt(lm: LanguageModel, item: GeneratedPrompt) -> str | ChatPrompt:
    """The model's prompt for a generated one: its chat template when it has one, else the plain text (system first)."""
    if lm.has_chat_template:
        return lm.format_prompt(item.user, item.system)
    return f"{item.system}\n\n{item.user}" if item.system else item.user


def granularity_for(item: GeneratedPrompt, n_tokens: int, config: CalibrationConfig) -> str:
    if item.kind == "principles":
        return "line"
    return "sentence" if n_tokens <= config.sentence_max_tokens else "paragraph"


def _spec(item: GeneratedPrompt, granularity: str, config: CalibrationConfig, mask_seed: int) -> dict:
    return {"prompt": item.to_json(), "granularity": granularity, "removal": config.removal, "masks": config.masks,
            "mask_seed": mask_seed}


def measure_prompt(lm: LanguageModel, item: GeneratedPrompt, granularity: str, config: CalibrationConfig,
                   mask_seed: int) -> PromptAblations:
    """Leave-one-out and `config.masks` random ablations of one prompt, with its attention features."""
    prompt = chat_prompt(lm, item)
    ablation = AblationConfig(removal=config.removal, surrogate_masks=max(1, config.masks), seed=mask_seed)
    loo = segment_salience(lm, prompt, item.target, "leave_one_out", granularity=granularity, config=ablation)
    kept, logprobs = [loo.kept], [loo.logprobs]
    if config.masks > 0:
        rand = segment_salience(lm, prompt, item.target, "ablation_surrogate", granularity=granularity,
                                config=ablation, result=loo.result)
        kept.append(rand.kept)
        logprobs.append(rand.logprobs)
    result = loo.result
    question = [int(x) for x in loo.segment_tokens[-1]]  # the last segment's own rows (the question, mostly)
    features, qfeatures = capture_feature_sets(lm.model, result.ids, [span_rows(result.n_prompt_tokens, loo.span),
                                                                      question], loo.segment_tokens)  # [S, L*H] each
    return PromptAblations(features=features, kept=np.concatenate(kept), logprobs=np.concatenate(logprobs),
                           original_logprob=float(loo.original_logprob), span_tokens=loo.span[1] - loo.span[0],
                           qfeatures=qfeatures, seg_sizes=np.array([len(t) for t in loo.segment_tokens]),
                           seg_starts=np.array([int(t[0]) for t in loo.segment_tokens]))


def save_record(path: pathlib.Path, record: PromptRecord) -> None:
    buf = io.BytesIO()
    d = record.data
    extra = {k: getattr(d, k) for k in ("qfeatures", "seg_sizes", "seg_starts") if getattr(d, k) is not None}
    np.savez(buf, features=d.features, kept=d.kept, logprobs=d.logprobs, original_logprob=d.original_logprob,
             span_tokens=d.span_tokens, seconds=record.seconds, spec=np.asarray(json.dumps(record.spec, sort_keys=True)),
             **extra)
    atomic_write_bytes(path, buf.getvalue())


def load_record(path: pathlib.Path) -> PromptRecord | None:
    """The cached record, or None when the file is missing or unreadable (then it is recomputed)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            extra = {k: z[k] for k in ("qfeatures", "seg_sizes", "seg_starts") if k in z.files}
            data = PromptAblations(features=z["features"], kept=z["kept"], logprobs=z["logprobs"],
                                   original_logprob=float(z["original_logprob"]), span_tokens=int(z["span_tokens"]),
                                   **extra)
            return PromptRecord(spec=json.loads(str(z["spec"])), data=data, seconds=float(z["seconds"]))
    except (OSError, ValueError, KeyError):
        return None


Progress = Callable[[int, int, GeneratedPrompt, str, float, bool], None]  # done, total, prompt, granularity, s, cached


def collect(lm: LanguageModel, out_dir: str | pathlib.Path, config: CalibrationConfig,
            progress: Progress | None = None) -> list[PromptRecord]:
    """Measures every training prompt of the recipe (skipping those cached in OUT/prompts/ with the same spec)."""
    folder = pathlib.Path(out_dir) / PROMPTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    count = lambda text: len(lm.tokenize(text).ids)
    items = generate_prompts(config.prompts, config.seed, "train", config.min_tokens, config.max_tokens, count)
    records = []
    for i, item in enumerate(items):
        n_tokens = count(item.user) + (count(item.system) if item.system else 0)
        granularity = granularity_for(item, n_tokens, config)
        mask_seed = int(np.random.default_rng([config.seed, i]).integers(2 ** 31))
        spec = _spec(item, granularity, config, mask_seed)
        path = folder / f"{item.id}.npz"
        cached = load_record(path)
        stale = cached is not None and "question" in config.features and cached.data.qfeatures is None  # older cache
        if cached is None or stale or cached.spec != json.loads(json.dumps(spec, sort_keys=True)):
            start = time.perf_counter()
            data = measure_prompt(lm, item, granularity, config, mask_seed)
            cached = PromptRecord(spec=spec, data=data, seconds=time.perf_counter() - start)
            save_record(path, cached)
            was_cached = False
        else:
            was_cached = True
        records.append(cached)
        if progress is not None:
            progress(i + 1, len(items), item, granularity, cached.seconds, was_cached)
    return records


def fit_estimator(lm: LanguageModel, records: list[PromptRecord], config: CalibrationConfig) -> Estimator:
    """The ridge fit over the records (attention/estimator.py), with the recipe and the training hash."""
    weight, alpha, quality = fit_weights([r.data for r in records], config.alphas, blocks=config.features)
    digest = training_hash([{**r.spec, "kept": r.data.kept.astype(int).tolist()} for r in records])
    return Estimator(weight=weight, model=lm.name, shape=attention_shape(lm.model), alpha=alpha, quality=quality,
                     recipe=config.recipe(), seed=config.seed, training_hash=digest, features=tuple(config.features))


def calibrate(lm: LanguageModel, out_dir: str | pathlib.Path, config: CalibrationConfig = CalibrationConfig(),
              progress: Progress | None = None) -> Estimator:
    """Collects (resumably) and fits; writes OUT/estimator.npz and returns the estimator."""
    attention_shape(lm.model)  # an unsupported family fails before any forward
    if config.prompts < 2:
        raise SalienceError(f"{config.prompts} calibration prompt(s): the fit needs at least 2 (5 or more to "
                            "cross-validate). Fix: raise --prompts.")
    records = collect(lm, out_dir, config, progress)
    estimator = fit_estimator(lm, records, config)
    estimator.save(pathlib.Path(out_dir) / ESTIMATOR_FILE)
    return estimator


__all__ = ["CalibrationConfig", "ESTIMATOR_FILE", "calibrate", "collect", "fit_estimator", "load_estimator",
           "measure_prompt"]
