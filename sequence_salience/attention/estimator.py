"""The learned estimator: a linear map from per-head attention features to ablation effects, and its file.

Model (the AT2 idea, Cohen-Wang et al. 2025, https://arxiv.org/abs/2504.13752; our own fit): the value
of segment s for a target span of n tokens is

    value[s] = n * features[s] . w          (features: <float32>[S, L*H], attention/features.py)

in nats of log p(target span), the scale of leave one segment out. An ablation that removes the
segments R (any set) is predicted to lower log p(span) by the sum of their values, so every scored
ablation of a training prompt is one linear equation in w:

    (log p(span) - log p(span | R removed)) / n  =  (sum_{s in R} features[s]) . w

Leave-one-out rows remove one segment; random-mask rows (the surrogate's masks) remove about half.
w is the ridge solution over all rows of all prompts (each prompt's rows weighted to total 1; the features
unscaled: all are shares of attention), with the ridge weight chosen from a grid by prompt-grouped
cross-validation; no intercept (a segment nobody attends to has value 0). Ridge, not
non-negative least squares: heads whose attention signals an irrelevant segment get negative weights.
Closed form, so the same data give the same weights bit for bit.

File: an .npz (no pickles) with `weight` <float64>[L*H] and `meta`, a JSON string: format, model,
model_type, n_layers, n_heads, ridge alpha, cross-validated figures, recipe, seed, training_hash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import pathlib
from collections.abc import Mapping, Sequence

import numpy as np

from sequence_salience.attention.features import AttentionShape
from sequence_salience.errors import SalienceError
from sequence_salience.files import atomic_write_bytes

FORMAT = "sequence-salience/attention-estimator/1"
ALPHAS: tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
CV_FOLDS = 5

# The blocks a segment's feature row can be made of (FeatureInputs -> <float64>[S, width]), in this order:
#   span      per layer and head, the attention of the target span's rows to the segment (L*H);
#   share     the same, divided by the head's attention to all segments (what the head splits among them; L*H);
#   question  per layer and head, the attention of the last segment's own rows (the question, mostly) (L*H);
#   position  whether the segment is the last one (next to the target), and its share of the segments' tokens (2).
FEATURE_BLOCKS = ("span", "share", "question", "position")
DEFAULT_FEATURES: tuple[str, ...] = ("span",)


@dataclasses.dataclass(frozen=True)
class FeatureInputs:
    """What one forward captures for a segmentation: span <float32>[S, L*H] (attention of the span's rows),
    question <float32>[S, L*H] or None (of the last segment's rows), sizes <int64>[S] (tokens per segment)."""

    span: np.ndarray
    question: np.ndarray | None = None
    sizes: np.ndarray | None = None


def block_width(block: str, shape: AttentionShape) -> int:
    return 2 if block == "position" else shape.n_features


def design_features(blocks: Sequence[str], inputs: FeatureInputs) -> np.ndarray:
    """<float64>[S, width]: the segments' feature rows, the named blocks side by side (FEATURE_BLOCKS)."""
    span = np.asarray(inputs.span, dtype=np.float64)  # [S, F]
    S = span.shape[0]
    parts = []
    for block in blocks:
        if block == "span":
            parts.append(span)
        elif block == "share":
            parts.append(span / np.maximum(span.sum(axis=0, keepdims=True), 1e-12))
        elif block == "question":
            if inputs.question is None:
                raise SalienceError("This estimator reads the question rows' attention, and it was not captured. Fix: "
                                    "capture both row sets (capture_feature_sets).")
            parts.append(np.asarray(inputs.question, dtype=np.float64))
        elif block == "position":
            sizes = np.ones(S) if inputs.sizes is None else np.asarray(inputs.sizes, dtype=np.float64)
            last = np.zeros(S)
            last[-1] = 1.0
            parts.append(np.stack([last, sizes / sizes.sum()], axis=1))
        else:
            raise SalienceError(f"Unknown feature block {block!r}. Fix: use some of {FEATURE_BLOCKS}.")
    return np.concatenate(parts, axis=1)


@dataclasses.dataclass(frozen=True)
class Estimator:
    """A fitted estimator for one model.

    Attributes:
      weight: <float64>[L*H] one weight per layer and head (layer-major, as the features).
      model: the name of the model it was fitted on (LanguageModel.name).
      shape: the model's family, layers and heads; features of another shape are refused.
      alpha: the ridge weight chosen by cross-validation.
      quality: figures of the fit (cross-validated "cv_mse", "cv_r2" of the per-token ablation effects).
      recipe: how the training data were made (prompts, lengths, granularities, masks, removal).
      seed: the calibration seed.
      training_hash: sha256 of the training prompts, targets, segmentations and masks.
      features: the feature blocks its weights read (FEATURE_BLOCKS), in order.
    """

    weight: np.ndarray
    model: str
    shape: AttentionShape
    alpha: float
    quality: Mapping[str, float]
    recipe: Mapping[str, object]
    seed: int
    training_hash: str
    features: tuple[str, ...] = DEFAULT_FEATURES

    @property
    def needs_question(self) -> bool:
        """Whether the question rows' attention must be captured (the "question" block)."""
        return "question" in self.features

    def values(self, features: "np.ndarray | FeatureInputs", span_tokens: int) -> np.ndarray:
        """<float64>[S] segment values (nats of log p(span)) from the captured features (FeatureInputs, or the span
        rows' features <float32>[S, L*H] alone for an estimator of the "span" block only)."""
        inputs = features if isinstance(features, FeatureInputs) else FeatureInputs(span=features)
        if inputs.span.shape[1] != self.shape.n_features:
            raise SalienceError(f"The features have {inputs.span.shape[1]} layer x head columns; the estimator fitted "
                                f"on {self.model!r} has {self.shape.n_features}. Fix: use the estimator of this model "
                                "(`sequence-salience calibrate --model ...`).")
        return span_tokens * (design_features(self.features, inputs) @ self.weight)

    def check_model(self, shape: AttentionShape, model_name: str) -> None:
        """SalienceError unless features of a model of `shape` fit this estimator."""
        if shape != self.shape:
            raise SalienceError(
                f"This attention estimator was fitted on {self.model!r} ({self.shape.model_type}, "
                f"{self.shape.n_layers} layers x {self.shape.n_heads} heads); the model {model_name!r} is "
                f"{shape.model_type} with {shape.n_layers} layers x {shape.n_heads} heads. Fix: fit one for it with "
                "`sequence-salience calibrate --model ...` and pass that file.")

    def meta(self) -> dict:
        return {"format": FORMAT, "model": self.model, "model_type": self.shape.model_type,
                "n_layers": self.shape.n_layers, "n_heads": self.shape.n_heads, "alpha": self.alpha,
                "quality": dict(self.quality), "recipe": dict(self.recipe), "seed": self.seed,
                "training_hash": self.training_hash, "features": list(self.features)}

    def save(self, path: str | pathlib.Path) -> None:
        """Writes the .npz atomically (weight and meta; no pickled objects)."""
        buf = io.BytesIO()
        np.savez(buf, weight=np.asarray(self.weight, dtype=np.float64),
                 meta=np.asarray(json.dumps(self.meta(), sort_keys=True)))
        atomic_write_bytes(path, buf.getvalue())


def load_estimator(path: str | pathlib.Path) -> Estimator:
    """Reads an estimator file written by Estimator.save; SalienceError naming the file when it is not one."""
    try:
        with np.load(path, allow_pickle=False) as data:
            weight = np.asarray(data["weight"], dtype=np.float64)
            meta = json.loads(str(data["meta"]))
    except FileNotFoundError:
        raise SalienceError(f"No attention estimator at {path}. Fix: check the path, or fit one with "
                            "`sequence-salience calibrate --model ... --out DIR`.") from None
    except (OSError, ValueError, KeyError) as e:
        raise SalienceError(f"{path} is not an attention estimator file ({type(e).__name__}: {e}). Fix: pass the "
                            "estimator.npz that `sequence-salience calibrate` writes.") from None
    if meta.get("format") != FORMAT:
        raise SalienceError(f"{path} has format {meta.get('format')!r}, not {FORMAT!r}. Fix: refit it with "
                            "`sequence-salience calibrate`.")
    shape = AttentionShape(meta["model_type"], int(meta["n_layers"]), int(meta["n_heads"]))
    blocks = tuple(meta.get("features", DEFAULT_FEATURES))
    if any(b not in FEATURE_BLOCKS for b in blocks):
        raise SalienceError(f"{path} reads feature blocks {list(blocks)}; this version knows {list(FEATURE_BLOCKS)}. "
                            "Fix: refit it with `sequence-salience calibrate`.")
    width = sum(block_width(b, shape) for b in blocks)
    if weight.shape != (width,):
        raise SalienceError(f"{path}: {weight.shape[0]} weights for {shape.n_layers} x {shape.n_heads} heads and the "
                            f"blocks {list(blocks)} ({width}). Fix: refit it with `sequence-salience calibrate`.")
    return Estimator(weight=weight, model=meta["model"], shape=shape, alpha=float(meta["alpha"]),
                     quality=meta.get("quality", {}), recipe=meta.get("recipe", {}), seed=int(meta["seed"]),
                     training_hash=meta["training_hash"], features=blocks)


@dataclasses.dataclass(frozen=True)
class PromptAblations:
    """One training prompt's data: features <float32>[S, F], the scored ablations kept <bool>[R, S] with
    their log p(span) <float64>[R], log p(span) of the unedited prompt, and the span's token count; optionally
    the attention of the last segment's own rows (the question) to each segment <float32>[S, F] and each
    segment's token count and first position <int64>[S]."""

    features: np.ndarray
    kept: np.ndarray
    logprobs: np.ndarray
    original_logprob: float
    span_tokens: int
    qfeatures: np.ndarray | None = None
    seg_sizes: np.ndarray | None = None
    seg_starts: np.ndarray | None = None


def feature_inputs(prompt: PromptAblations) -> FeatureInputs:
    return FeatureInputs(span=prompt.features, question=prompt.qfeatures, sizes=prompt.seg_sizes)


def design(prompt: PromptAblations, blocks: Sequence[str] = DEFAULT_FEATURES) -> tuple[np.ndarray, np.ndarray]:
    """The prompt's equations: X <float64>[R, F] (the segments' feature rows, design_features of `blocks`, summed
    over each ablation's removed segments) and y <float64>[R] (its drop in log p(span), per span token)."""
    removed = (~prompt.kept).astype(np.float64)  # [R, S]
    X = removed @ design_features(blocks, feature_inputs(prompt))  # [R, F]
    y = (prompt.original_logprob - prompt.logprobs) / prompt.span_tokens  # [R]
    return X, y


def ridge(X: np.ndarray, y: np.ndarray, weights: np.ndarray, alpha: float) -> np.ndarray:
    """<float64>[F]: argmin_w sum_i weights_i (X_i w - y_i)^2 + alpha * sum(weights) * |w|^2; no intercept.

    The columns are not standardized: every feature is a share of one head's attention, in the same unit, and
    standardizing gave a head that barely ever attends to a segment a weight of 30,000 (a tiny column scaled up),
    which held-out prompts with slightly more attention there turn into nonsense."""
    A = X.T @ (X * weights[:, None]) + alpha * weights.sum() * np.eye(X.shape[1])  # [F, F]
    return np.linalg.solve(A, X.T @ (weights * y))


def stack(prompts: Sequence[PromptAblations], blocks: Sequence[str] = DEFAULT_FEATURES
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """X <[R, F]>, y <[R]>, row weights <[R]> (1 / the prompt's rows) and the prompt index <[R]> of every row."""
    parts = [design(p, blocks) for p in prompts]
    X = np.concatenate([x for x, _ in parts])
    y = np.concatenate([t for _, t in parts])
    weights = np.concatenate([np.full(len(t), 1.0 / len(t)) for _, t in parts])
    group = np.concatenate([np.full(len(t), i) for i, (_, t) in enumerate(parts)])
    return X, y, weights, group


def fit_weights(prompts: Sequence[PromptAblations], alphas: Sequence[float] = ALPHAS,
                folds: int = CV_FOLDS, blocks: Sequence[str] = DEFAULT_FEATURES
                ) -> tuple[np.ndarray, float, dict[str, float]]:
    """(w <float64>[F], alpha, quality): the ridge fit over every prompt's rows, alpha chosen by prompt-grouped
    cross-validation (prompt i in fold i % folds; weighted mean squared error), refitted on all prompts."""
    if not prompts:
        raise SalienceError("No training prompts to fit the attention estimator on. Fix: calibrate on some prompts.")
    X, y, weights, group = stack(prompts, blocks)
    k = min(folds, len(prompts))
    errors = {}
    for alpha in alphas:
        sq = 0.0
        if k < 2:
            errors[alpha] = float("nan")
            continue
        for f in range(k):
            test = group % k == f
            w = ridge(X[~test], y[~test], weights[~test], alpha)
            sq += float(weights[test] @ (X[test] @ w - y[test]) ** 2)
        errors[alpha] = sq / weights.sum()
    best = min(alphas, key=lambda a: (np.nan_to_num(errors[a], nan=np.inf), -a)) if k >= 2 else alphas[-1]
    w = ridge(X, y, weights, best)
    mean = (weights @ y) / weights.sum()
    var = float(weights @ (y - mean) ** 2 / weights.sum())
    quality = {"cv_mse": errors[best], "cv_r2": 1.0 - errors[best] / var if var > 0 else float("nan"),
               "rows": float(len(y)), "prompts": float(len(prompts))}
    return w, float(best), quality


def training_hash(items: Sequence[Mapping[str, object]]) -> str:
    """sha256 of the training inputs (each a JSON-able dict: prompt, target, segmentation, masks), in order."""
    h = hashlib.sha256()
    for item in items:
        h.update(json.dumps(item, sort_keys=True).encode())
        h.update(b"\n")
    return h.hexdigest()
