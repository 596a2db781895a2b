"""The one place that maps model families to the modules "Inside the model" reads.

Every feature of `sequence_salience.inside` (logit lens, feed-forward
sub-updates, value index, interventions) reaches into the model only through
the `Architecture` returned by `resolve_architecture`, so supporting a new
family is one entry in `FAMILIES`.

Two feed-forward kinds:

* ``gated`` (Llama, SmolLM2, Mistral, Qwen2/3, Gemma 1/2/3): the FFN is
  ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``. The value vectors are the
  columns of ``down_proj.weight`` (<[D, F]>), the coefficients are the input of
  ``down_proj`` (``act(gate(x)) * up(x)``, <[F]> per position).
* ``conv1d`` (GPT-2): the FFN is ``c_proj(act(c_fc(x)))`` with HF ``Conv1D``
  layers whose weight is <[in, out]>, so the value vectors are the rows of
  ``c_proj.weight`` (<[F, D]>) and the coefficients are the input of ``c_proj``.

The residual stream *before* a layer's FFN is the input of the layer's pre-FFN
norm (``post_attention_layernorm`` in Llama, ``pre_feedforward_layernorm`` in
Gemma 2/3, ``ln_2`` in GPT-2); *after* the FFN it is the decoder layer's
output. Both are read through the final norm and the unembedding ("logit
lens"), with Gemma 2/3's final logit soft-capping where the config sets it.
Gemma 2/3 also normalise the FFN output (``post_feedforward_layernorm``)
before adding it to the residual stream: there the sub-updates sum to the
FFN's own output, which that norm then rescales.
"""

from __future__ import annotations

import dataclasses
import logging
import torch

from sequence_salience.errors import SalienceError

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Layout:
    """Module paths (dotted, from the causal-LM module) of one family of models.

    Attributes:
      kind: "gated" or "conv1d" (see the module docstring).
      layers: the list of decoder layers.
      ffn: the feed-forward block inside a decoder layer.
      ffn_in: inside `ffn`, the module(s) computing the coefficients (checked to exist).
      ffn_out: inside `ffn`, the output projection holding the value vectors.
      ffn_norm: inside a decoder layer, the norm whose input is the residual before the FFN.
      final_norm: the norm applied before the unembedding.
    """

    kind: str
    layers: str
    ffn: str
    ffn_in: tuple[str, ...]
    ffn_out: str
    ffn_norm: str
    final_norm: str


GATED = Layout(
    kind="gated", layers="model.layers", ffn="mlp", ffn_in=("gate_proj", "up_proj", "act_fn"),
    ffn_out="down_proj", ffn_norm="post_attention_layernorm", final_norm="model.norm",
)
GATED_SANDWICH = dataclasses.replace(GATED, ffn_norm="pre_feedforward_layernorm")  # Gemma 2/3: pre- and post-FFN norms
GPT2 = Layout(
    kind="conv1d", layers="transformer.h", ffn="mlp", ffn_in=("c_fc", "act"), ffn_out="c_proj",
    ffn_norm="ln_2", final_norm="transformer.ln_f",
)

# config.model_type -> layout. The one table to extend for a new family.
FAMILIES: dict[str, Layout] = {
    "llama": GATED,  # also SmolLM2 (the embedded default model)
    "mistral": GATED,
    "qwen2": GATED,
    "qwen3": GATED,
    "gemma": GATED,
    "gemma2": GATED_SANDWICH,
    "gemma3_text": GATED_SANDWICH,
    "gpt2": GPT2,
}

# Tried in order for a model_type not in FAMILIES; the first whose modules all exist is used.
FALLBACK_LAYOUTS: tuple[Layout, ...] = (GATED, GPT2)


def _get(root: torch.nn.Module, path: str) -> torch.nn.Module | None:
    obj = root
    for part in path.split("."):
        if part.isdigit() and isinstance(obj, (torch.nn.ModuleList, torch.nn.Sequential)):
            idx = int(part)
            obj = obj[idx] if idx < len(obj) else None
        else:
            obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _missing(model: torch.nn.Module, layout: Layout) -> str | None:
    """The first module path of `layout` that `model` lacks, or None when all exist."""
    layers = _get(model, layout.layers)
    if layers is None or not isinstance(layers, (torch.nn.ModuleList, torch.nn.Sequential)) or len(layers) == 0:
        return layout.layers
    for i in range(len(layers)):
        base = f"{layout.layers}.{i}"
        for path in (f"{base}.{layout.ffn}", f"{base}.{layout.ffn_norm}",
                     *(f"{base}.{layout.ffn}.{p}" for p in layout.ffn_in), f"{base}.{layout.ffn}.{layout.ffn_out}"):
            if _get(model, path) is None:
                return path
    if _get(model, layout.final_norm) is None:
        return layout.final_norm
    return None


@dataclasses.dataclass(frozen=True, eq=False)
class Architecture:
    """Handles on one loaded model's modules (from `resolve_architecture`).

    Attributes:
      family: config.model_type (with "(detected)" when found by probing, not by FAMILIES).
      layout: the module paths used.
      layers / ffns / ffn_outs / ffn_norms: one module per decoder layer.
      final_norm: the final norm module.
      unembed: the output embedding (lm_head).
      logit_softcap: Gemma 2/3's final_logit_softcapping, else None.
    """

    family: str
    layout: Layout
    layers: tuple[torch.nn.Module, ...]
    ffns: tuple[torch.nn.Module, ...]
    ffn_outs: tuple[torch.nn.Module, ...]
    ffn_norms: tuple[torch.nn.Module, ...]
    final_norm: torch.nn.Module
    unembed: torch.nn.Module
    logit_softcap: float | None

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def ffn_size(self) -> int:
        """F: value vectors per layer."""
        return int(self.value_matrix(0).shape[0])

    def value_matrix(self, layer: int) -> torch.Tensor:
        """The value vectors of `layer` as rows: <[F, D]> (a view of the weights, no copy)."""
        w = self.ffn_outs[layer].weight
        return w.T if self.layout.kind == "gated" else w  # Linear [D, F] vs Conv1D [F, D]

    def value_bias(self, layer: int) -> torch.Tensor | None:
        """The output projection's bias <[D]> (GPT-2), or None."""
        return getattr(self.ffn_outs[layer], "bias", None)

    def unembedding_matrix(self) -> torch.Tensor:
        """<[V, D]>: logits = h @ W.T (+ bias)."""
        return self.unembed.weight

    def logits(self, residual: torch.Tensor) -> torch.Tensor:
        """Logit lens: <[..., D]> residual -> <[..., V]> logits through the final norm and unembedding."""
        # Sharded models (device_map) may keep the norm and the unembedding on other devices.
        normed = self.final_norm(residual.to(_device_of(self.final_norm, residual)))
        logits = self.unembed(normed.to(self.unembed.weight.device))
        if self.logit_softcap:
            logits = torch.tanh(logits / self.logit_softcap) * self.logit_softcap
        return logits

    def project(self, vectors: torch.Tensor) -> torch.Tensor:
        """Vocabulary projection of value vectors: <[..., D]> -> <[..., V]> = E v (no norm, no bias).

        As in Geva et al. (2022) and LM-Debugger: a value vector is read by the
        tokens whose output embeddings align with it.
        """
        emb = self.unembedding_matrix()
        return vectors.to(emb.device, emb.dtype) @ emb.T


def _device_of(module: torch.nn.Module, default: torch.Tensor) -> torch.device:
    p = next(module.parameters(), None)
    return p.device if p is not None else default.device


def _text_config(model: torch.nn.Module):
    cfg = getattr(model, "config", None)
    get_text = getattr(cfg, "get_text_config", None)
    return get_text() if callable(get_text) else cfg


def resolve_architecture(model: torch.nn.Module) -> Architecture:
    """The `Architecture` of a causal LM (an HF `*ForCausalLM`).

    Raises:
      SalienceError naming the module that was not found, when the model's
      layout is not one of FAMILIES / FALLBACK_LAYOUTS.
    """
    cfg = _text_config(model)
    model_type = str(getattr(cfg, "model_type", "") or type(model).__name__)
    layout = FAMILIES.get(model_type)
    family = model_type
    if layout is not None:
        missing = _missing(model, layout)
        if missing is not None:
            raise SalienceError(
                f"Model type {model_type!r} ({type(model).__name__}) has no module {missing!r}, which "
                f"'Inside the model' reads for a {layout.kind} feed-forward layout. Fix: load a standard "
                "Hugging Face checkpoint of this family, or add its module names to FAMILIES in "
                "sequence_salience/inside/architectures.py."
            )
    else:
        misses = []
        for candidate in FALLBACK_LAYOUTS:
            missing = _missing(model, candidate)
            if missing is None:
                layout = candidate
                family = f"{model_type} (detected)"
                logger.warning("Model type %r is not in FAMILIES; using the %s layout found by its module names.",
                               model_type, candidate.kind)
                break
            misses.append(f"{candidate.kind} layout: no module {missing!r}")
        if layout is None:
            raise SalienceError(
                f"'Inside the model' does not know model type {model_type!r} ({type(model).__name__}): "
                + "; ".join(misses) + ". Supported families: " + ", ".join(sorted(FAMILIES))
                + ". Fix: add its module names to FAMILIES in sequence_salience/inside/architectures.py."
            )
    layers = tuple(_get(model, layout.layers))
    unembed = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if unembed is None or getattr(unembed, "weight", None) is None:
        raise SalienceError(
            f"{type(model).__name__} has no output embedding (lm_head) to read predictions through. "
            "Fix: load the model as a causal LM (AutoModelForCausalLM)."
        )
    ffns = tuple(_get(layer, layout.ffn) for layer in layers)
    softcap = getattr(cfg, "final_logit_softcapping", None)
    return Architecture(
        family=family,
        layout=layout,
        layers=layers,
        ffns=ffns,
        ffn_outs=tuple(_get(f, layout.ffn_out) for f in ffns),
        ffn_norms=tuple(_get(layer, layout.ffn_norm) for layer in layers),
        final_norm=_get(model, layout.final_norm),
        unembed=unembed,
        logit_softcap=float(softcap) if softcap else None,
    )

