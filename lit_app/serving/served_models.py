"""The models a server serves: each loaded once, with its own SharedLM (model lock, caches, jobs).

`load_served_models` loads the `--models` entries in order and logs each one's memory
(its weights, and how much the process grew while loading it); `lit_model_map` is the LIT
model map of all of them: for each name `name` (generation), `_name_salience`,
`_name_tokenizer` and their companions (lit_app/serving/model_group.py: compare, inside the model,
explain). `warm_start` is LIT's
--warm_start for the generation models. LIT's model
selector lists the generation models; selecting two shows the modules once per model.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psutil
from lit_nlp.api import model as lit_model

import sequence_salience as ss
from lit_app.serving.model_group import lit_models
from lit_app.model.shared_model import SharedLM

logger = logging.getLogger(__name__)

MIB = 1 << 20


@dataclasses.dataclass
class ServedModel:
    """One loaded model: its LIT name, what --models gave for it, and what loading it cost.

    Attributes:
      weight_bytes: bytes of its parameters and buffers.
      rss_delta_bytes: how much the process's resident memory grew while loading it.
      load_s: seconds it took to load.
    """

    name: str
    spec: str
    shared: SharedLM
    weight_bytes: int
    rss_delta_bytes: int
    load_s: float


def weight_bytes(lm: ss.LanguageModel) -> int:
    """Bytes of a loaded model's parameters and buffers (shared tensors counted once)."""
    model = getattr(lm, "model", None)
    if model is None:
        return 0
    seen, total = set(), 0
    for t in (*model.parameters(), *model.buffers()):
        if t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        total += t.numel() * t.element_size()
    return total


def load_served_models(
    specs: Sequence[tuple[str, str]],
    load: Callable[[str], ss.LanguageModel],
    make_shared: Callable[[ss.LanguageModel], SharedLM],
) -> list[ServedModel]:
    """Loads each (name, spec) once with `load(spec)`, wraps it with `make_shared(lm)`, logs its memory.

    Raises whatever `load` raises (the server reports `ss.SalienceError` naming the entry).
    """
    process = psutil.Process()
    served = []
    for name, spec in specs:
        rss0, t0 = process.memory_info().rss, time.perf_counter()
        logger.info("Loading model %r as %r ...", spec, name)
        lm = load(spec)
        shared = make_shared(lm)
        m = ServedModel(name=name, spec=spec, shared=shared, weight_bytes=weight_bytes(lm),
                        rss_delta_bytes=process.memory_info().rss - rss0, load_s=time.perf_counter() - t0)
        logger.info("Model %r (%s): %.0f MiB of weights (%s), process +%.0f MiB (now %.0f MiB), loaded in %.1f s.",
                    name, spec, m.weight_bytes / MIB, shared.dtype or "?", m.rss_delta_bytes / MIB,
                    process.memory_info().rss / MIB, m.load_s)
        served.append(m)
    return served


def lit_model_map(served: Sequence[ServedModel]) -> dict[str, lit_model.Model]:
    """The LIT model map of every served model: the generation models first, in --models order.

    LIT selects the first model by default; each generation model is followed in the map by
    its companions (`model_group.lit_models`).
    """
    generation: dict[str, lit_model.Model] = {}
    companions: dict[str, lit_model.Model] = {}
    for m in served:
        group = lit_models(m.shared, m.name)
        first = next(iter(group))
        generation[first] = group.pop(first)
        companions.update(group)
    return {**generation, **companions}


def warm_start(served: Sequence[ServedModel], datasets: Mapping[str, Any], rate: float, seed: int = 0) -> int:
    """LIT's --warm_start for the generation models: greedy responses of every example (rate 1) or of a
    random sample of int(n * rate) of each dataset (seeded), computed at start into each model's
    generation caches (memory and disk), so the data table and the first click show them at once.
    Salience is not warmed (each explanation needs its own forward + backward). Returns how many
    generations ran or were found cached."""
    if not 0 <= rate <= 1:
        raise ValueError(f"--warm_start is {rate}; use a fraction from 0 to 1 (LIT's meaning).")
    rng = random.Random(seed)
    count = 0
    for m in served:
        for name, ds in datasets.items():
            examples = list(ds.examples)
            if rate < 1:
                examples = rng.sample(examples, int(len(examples) * rate))
            start = time.perf_counter()
            for ex in examples:
                m.shared.generate(m.shared.format_prompt(ex))
            count += len(examples)
            logger.info("Warm start of model %r on dataset %r: %d generation(s) in %.1f s.", m.name, name,
                        len(examples), time.perf_counter() - start)
    return count


def describe(served: Sequence[ServedModel]) -> str:
    """One line naming every served model and its memory."""
    return "; ".join(f"{m.name} ({m.spec}: {m.weight_bytes / MIB:.0f} MiB weights, +{m.rss_delta_bytes / MIB:.0f}"
                     " MiB process)" for m in served)

