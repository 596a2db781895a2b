"""Learned attention attribution (sequence_salience/attention/): the features against eager attention, the ridge
fit, the estimator file, the generated prompts and a seeded calibration on a tiny random Llama."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import sequence_salience as ss
from sequence_salience.ablation import segment_salience
from sequence_salience.methods import AblationConfig
from sequence_salience.attention import SHIPPED, AttentionShape, attention_shape, capture_features, estimator_for, span_rows
from sequence_salience.calibration import CalibrationConfig, calibrate
from sequence_salience.attention.estimator import (Estimator, FeatureInputs, PromptAblations, design, design_features,
                                                   fit_weights, load_estimator)
from sequence_salience.attention.prompts import KINDS, generate_prompt, generate_prompts
from tests.unit.estimators import saved_random_estimator
from tests.unit.tiny_models import MODEL_BUILDERS, tiny_tokenizer

REPO = pathlib.Path(__file__).resolve().parents[2]


def eager_reference(model: torch.nn.Module, ids, rows, segments) -> np.ndarray:
    """<[S, L*H]> from the full attention maps of an eager forward (output_attentions), summed over each segment's
    columns of the span rows and averaged over the rows: the independent computation."""
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            maps = model(torch.tensor([list(ids)]), output_attentions=True).attentions  # L x [1, H, N, N]
    finally:
        model.set_attn_implementation("sdpa")
    per_layer = [np.stack([a[0][:, rows][:, :, seg].sum(-1).mean(-1).numpy() for seg in segments]) for a in maps]
    return np.concatenate(per_layer, axis=1)  # [S, L*H] layer-major


@pytest.mark.parametrize("family", sorted(MODEL_BUILDERS))
@pytest.mark.parametrize("rows", [[30, 31, 32, 35], [39]], ids=["four_rows", "last_row"])
def test_features_equal_eager_attention_maps(family, rows):
    model = MODEL_BUILDERS[family](seed=3).double().eval()
    model.set_attn_implementation("sdpa")
    ids = np.random.default_rng(0).integers(3, 290, size=40).tolist()
    segments = [[1, 2, 3], [4, 5, 6, 7, 8], [10, 20, 29], [33], [0]]
    got = capture_features(model, ids, rows, segments)
    want = eager_reference(model, ids, rows, segments)
    assert got.shape == (5, model.config.num_hidden_layers * model.config.num_attention_heads)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    # causality: a segment after every row gets exactly nothing; the whole prefix gets all of it
    assert np.all(capture_features(model, ids, [5], [[6, 7]]) == 0)
    np.testing.assert_allclose(capture_features(model, ids, [5], [list(range(6))]), 1.0, atol=1e-6)


def test_features_in_row_chunks_equal_one_chunk(monkeypatch):
    model = MODEL_BUILDERS["llama"](seed=1).double().eval()
    ids = np.random.default_rng(1).integers(3, 290, size=30).tolist()
    rows, segments = list(range(10, 30)), [[1, 2], [3, 4, 5], [12, 13]]
    whole = capture_features(model, ids, rows, segments)
    monkeypatch.setattr("sequence_salience.attention.features.ROW_CHUNK_ELEMENTS", 1)
    np.testing.assert_allclose(capture_features(model, ids, rows, segments), whole, atol=1e-12)


def test_span_rows_are_the_positions_before_each_span_token():
    assert span_rows(10, (0, 3)) == [9, 10, 11]
    assert span_rows(10, (2, 4)) == [11, 12]


def test_an_unsupported_family_is_refused_by_name():
    class Fake(torch.nn.Module):
        config = type("C", (), {"model_type": "gemma2"})()

    with pytest.raises(ss.SalienceError, match="gemma2.*leave_one_out"):
        attention_shape(Fake())


def synthetic(rng, w, n_prompts=30, features=12, noise=0.0):
    out = []
    for _ in range(n_prompts):
        S = int(rng.integers(3, 9))
        X = rng.random((S, features)).astype(np.float32)
        kept = np.concatenate([~np.eye(S, dtype=bool), rng.random((4, S)) < 0.5])  # [S+4, S]
        n = int(rng.integers(1, 6))
        drop = ((~kept).astype(np.float64) @ X.astype(np.float64) @ w) * n + noise * rng.normal(size=len(kept))
        out.append(PromptAblations(features=X, kept=kept, logprobs=-1.0 - drop, original_logprob=-1.0, span_tokens=n))
    return out


def test_the_fit_recovers_known_weights_from_exact_ablations():
    rng = np.random.default_rng(0)
    w = rng.normal(size=12)
    got, alpha, quality = fit_weights(synthetic(rng, w), alphas=(1e-8, 1e-2, 1.0))
    assert alpha == 1e-8
    np.testing.assert_allclose(got, w, atol=1e-5)
    assert quality["cv_r2"] > 0.999


def test_the_fit_of_noise_is_poor_and_cross_validation_says_so():
    rng = np.random.default_rng(1)
    prompts = synthetic(rng, np.zeros(12), noise=1.0)
    _, _, quality = fit_weights(prompts)
    assert quality["cv_r2"] < 0.1


def test_design_rows_sum_the_removed_segments_features_per_span_token():
    X = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]], dtype=np.float32)
    kept = np.array([[False, True, True], [False, False, True]])
    p = PromptAblations(features=X, kept=kept, logprobs=np.array([-3.0, -5.0]), original_logprob=-1.0, span_tokens=2)
    D, y = design(p)
    np.testing.assert_array_equal(D, [[1.0, 0.0], [1.0, 2.0]])
    np.testing.assert_array_equal(y, [1.0, 2.0])


def make_estimator(F=8, seed=0) -> Estimator:
    return Estimator(weight=np.random.default_rng(seed).normal(size=F), model="tiny", shape=AttentionShape("llama", 2, 4),
                     alpha=0.1, quality={"cv_r2": 0.5}, recipe={"prompts": 3}, seed=seed, training_hash="ab" * 32)


def test_the_estimator_file_round_trips(tmp_path):
    est = make_estimator()
    est.save(tmp_path / "e.npz")
    back = load_estimator(tmp_path / "e.npz")
    np.testing.assert_array_equal(back.weight, est.weight)
    assert (back.model, back.shape, back.alpha, back.seed, back.training_hash) == (
        est.model, est.shape, est.alpha, est.seed, est.training_hash)
    assert dict(back.quality) == {"cv_r2": 0.5} and dict(back.recipe) == {"prompts": 3}
    X = np.ones((3, 8), dtype=np.float32)
    np.testing.assert_allclose(back.values(X, 2), 2 * X @ est.weight)


def test_bad_estimator_files_and_shapes_name_the_fix(tmp_path):
    with pytest.raises(ss.SalienceError, match="calibrate"):
        load_estimator(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ss.SalienceError, match="not an attention estimator"):
        load_estimator(tmp_path / "junk.npz")
    with pytest.raises(ss.SalienceError, match="30 layers x 9 heads.*calibrate"):
        make_estimator().check_model(AttentionShape("llama", 30, 9), "other")
    with pytest.raises(ss.SalienceError, match="calibrate"):
        make_estimator().values(np.ones((2, 5), dtype=np.float32), 1)


def test_feature_blocks_by_hand():
    span = np.array([[0.2, 0.0], [0.6, 0.1], [0.2, 0.3]], dtype=np.float32)  # [S=3, F=2]
    question = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=np.float32)
    inputs = FeatureInputs(span=span, question=question, sizes=np.array([2, 6, 2]))
    got = design_features(("span", "share", "question", "position"), inputs)
    share = [[0.2, 0.0], [0.6, 0.25], [0.2, 0.75]]  # each column divided by its sum (1.0, 0.4)
    position = [[0, 0.2], [0, 0.6], [1, 0.2]]  # the last segment; tokens 2, 6, 2 of 10
    np.testing.assert_allclose(got, np.concatenate([span, share, question, position], axis=1), rtol=1e-6)
    with pytest.raises(ss.SalienceError, match="question rows"):
        design_features(("question",), FeatureInputs(span=span))


def test_an_estimator_of_several_blocks_round_trips_and_applies_them(tmp_path):
    shape = AttentionShape("llama", 2, 4)
    blocks = ("span", "question", "position")
    est = Estimator(weight=np.arange(18, dtype=np.float64) / 10, model="tiny", shape=shape, alpha=0.1, quality={},
                    recipe={}, seed=0, training_hash="cd" * 32, features=blocks)
    est.save(tmp_path / "e.npz")
    back = load_estimator(tmp_path / "e.npz")
    assert back.features == blocks and back.needs_question
    rng = np.random.default_rng(0)
    inputs = FeatureInputs(span=rng.random((3, 8)), question=rng.random((3, 8)), sizes=np.array([1, 2, 3]))
    np.testing.assert_allclose(back.values(inputs, 3), 3 * design_features(blocks, inputs) @ est.weight)
    bad = dataclasses.replace(est, weight=np.ones(8))
    bad.save(tmp_path / "bad.npz")
    with pytest.raises(ss.SalienceError, match="blocks.*refit"):
        load_estimator(tmp_path / "bad.npz")


def test_an_unknown_model_without_a_file_is_told_to_calibrate():
    with pytest.raises(ss.SalienceError, match="sequence-salience calibrate --model"):
        estimator_for("some/other-model")


def test_the_shipped_estimator_is_declared_as_package_data():
    pyproject = (REPO / "pyproject.toml").read_text()
    assert "attention/*.npz" in pyproject
    for name in SHIPPED.values():
        est = load_estimator(REPO / "sequence_salience" / "attention" / name)
        assert est.shape == AttentionShape("llama", 30, 9) and np.all(np.isfinite(est.weight))


@pytest.mark.parametrize("split", ["train", "eval"])
def test_prompts_are_seeded_varied_and_within_their_length(split):
    a = generate_prompts(8, seed=5, split=split, min_tokens=100, max_tokens=800)
    assert a == generate_prompts(8, seed=5, split=split, min_tokens=100, max_tokens=800)
    assert a != generate_prompts(8, seed=6, split=split, min_tokens=100, max_tokens=800)
    assert {p.kind for p in a} == set(KINDS)
    for p in a:
        n = (len(p.user) + len(p.system or "")) / 4
        assert 100 <= n <= 800 * 1.6, (p.kind, n)  # grown a paragraph past the drawn length at most
        assert p.target.strip()
    notes = [p for p in a if p.kind == "notes"]
    for p in notes:
        paragraphs = p.user.split("\n\n")
        assert "The code for the" in paragraphs[p.fact_paragraph] and p.target.strip() in paragraphs[p.fact_paragraph]
    long = generate_prompt(5, 0, split, min_tokens=3000, max_tokens=4000, kind="notes")
    assert len(long.user) / 4 >= 3000


def test_the_splits_share_no_entity_and_no_sentence_with_the_shipped_rows():
    train = generate_prompts(40, seed=0, split="train", max_tokens=400)
    held = generate_prompts(40, seed=0, split="eval", max_tokens=400)
    facts = lambda ps: {p.target for p in ps if p.kind == "notes"}
    assert not facts(train) & facts(held)
    sentences = lambda text: {s.strip() for s in text.replace("\n", ". ").split(". ") if len(s.strip()) > 20}
    shipped = set()
    for path in (REPO / "lit_app" / "data").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            for key in ("prompt", "system", "target"):
                shipped |= sentences(str(row.get(key) or ""))
    assert shipped
    ours = set().union(*(sentences(p.user + "\n" + (p.system or "")) for p in train + held))
    assert not ours & shipped


@pytest.fixture(scope="module")
def tiny_llama_lm() -> ss.LanguageModel:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tiny_tokenizer()), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, pad_token_id=0,
                      bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    return ss.from_modules(LlamaForCausalLM(cfg).double().eval(), tiny_tokenizer(), name="tiny-llama-long")


TINY_RECIPE = CalibrationConfig(prompts=5, min_tokens=40, max_tokens=120, sentence_max_tokens=90, masks=2, seed=7)


def test_calibration_is_seeded_reproducible_and_resumable(tiny_llama_lm, tmp_path):
    seen = []
    a = calibrate(tiny_llama_lm, tmp_path / "a", TINY_RECIPE, lambda *args: seen.append(args[-1]))
    b = calibrate(tiny_llama_lm, tmp_path / "b", TINY_RECIPE)
    assert seen == [False] * 5
    np.testing.assert_array_equal(a.weight, b.weight)
    assert a.training_hash == b.training_hash and a.alpha == b.alpha
    assert a.shape == AttentionShape("llama", 2, 4) and np.all(np.isfinite(a.weight))
    saved = load_estimator(tmp_path / "a" / "estimator.npz")
    np.testing.assert_array_equal(saved.weight, a.weight)
    assert saved.recipe["masks"] == 2 and saved.seed == 7
    # a rerun measures nothing again and fits the same weights
    seen.clear()
    again = calibrate(tiny_llama_lm, tmp_path / "a", TINY_RECIPE, lambda *args: seen.append(args[-1]))
    assert seen == [True] * 5
    np.testing.assert_array_equal(again.weight, a.weight)
    # the other feature blocks read the same cached measurements, and fit as reproducibly
    blocks = ("span", "share", "question", "position")
    d = calibrate(tiny_llama_lm, tmp_path / "a", dataclasses.replace(TINY_RECIPE, features=blocks))
    e = calibrate(tiny_llama_lm, tmp_path / "b", dataclasses.replace(TINY_RECIPE, features=blocks))
    assert d.features == blocks and d.weight.shape == (3 * 8 + 2,) and d.training_hash == a.training_hash
    np.testing.assert_array_equal(d.weight, e.weight)
    np.testing.assert_array_equal(load_estimator(tmp_path / "b" / "estimator.npz").weight, e.weight)
    # another seed: other prompts and masks, other data
    c = calibrate(tiny_llama_lm, tmp_path / "c", CalibrationConfig(**{**TINY_RECIPE.recipe(), "alphas": TINY_RECIPE.alphas, "seed": 8}))
    assert c.training_hash != a.training_hash


PROMPT = "The capital of France is Paris. The capital of Italy is Rome.\n\nAlice has three apples and Bob has two."
TARGET = " Paris. The capital"


def test_the_method_is_the_estimator_over_the_captured_features(llama, tmp_path):
    est, config = saved_random_estimator(llama, tmp_path / "e.npz", seed=2, quality={"cv_r2": 0.4})
    seg = segment_salience(llama, PROMPT, TARGET, "attention_attribution", granularity="sentence", config=config,
                              span=(1, 3))
    r = seg.result
    features = eager_reference(llama.model, r.ids, [r.n_prompt_tokens, r.n_prompt_tokens + 1],
                               [list(t) for t in seg.segment_tokens])
    np.testing.assert_allclose(seg.values, 2 * features @ est.weight, atol=1e-5)
    assert len(seg.values) == 3 and seg.kept.shape == (0, 3)
    assert seg.quality == {"estimator_cv_r2": 0.4}


def test_the_features_come_from_the_unedited_prompts_forward_without_a_forward_of_their_own(llama, tmp_path, monkeypatch):
    est, config = saved_random_estimator(llama, tmp_path / "e.npz", seed=2)
    forwards = []
    original = type(llama.model.model).forward
    monkeypatch.setattr(type(llama.model.model), "forward", lambda self, *a, **k: forwards.append(1) or original(self, *a, **k))
    seg = segment_salience(llama, PROMPT, TARGET, "attention_attribution", granularity="sentence", config=config)
    assert len(forwards) == 1  # the scorer's forward of the unedited prompt, nothing else
    r = seg.result
    rows = span_rows(r.n_prompt_tokens, seg.span)
    want = capture_features(llama.model, r.ids, rows, [list(t) for t in seg.segment_tokens])  # its own forward
    np.testing.assert_allclose(seg.values, len(rows) * want @ est.weight, atol=1e-5)


def test_the_method_with_the_question_block_reads_the_last_segments_rows(llama, tmp_path):
    shape = attention_shape(llama.model)
    blocks = ("span", "question", "position")
    est = Estimator(weight=np.random.default_rng(3).normal(size=2 * shape.n_features + 2), model=llama.name,
                    shape=shape, alpha=1.0, quality={}, recipe={}, seed=0, training_hash="0" * 64, features=blocks)
    est.save(tmp_path / "q.npz")
    seg = segment_salience(llama, PROMPT, TARGET, "attention_attribution", granularity="sentence", span=(1, 3),
                           config=AblationConfig(attention_estimator=str(tmp_path / "q.npz")))
    r = seg.result
    segments = [list(t) for t in seg.segment_tokens]
    inputs = FeatureInputs(span=eager_reference(llama.model, r.ids, [r.n_prompt_tokens, r.n_prompt_tokens + 1], segments),
                           question=eager_reference(llama.model, r.ids, segments[-1], segments),
                           sizes=np.array([len(t) for t in segments]))
    np.testing.assert_allclose(seg.values, 2 * design_features(blocks, inputs) @ est.weight, atol=1e-5)


def test_the_method_without_an_estimator_names_calibrate_and_a_foreign_file_is_refused(llama, tmp_path):
    with pytest.raises(ss.SalienceError, match="sequence-salience calibrate --model"):
        segment_salience(llama, PROMPT, TARGET, "attention_attribution", granularity="sentence")
    foreign = Estimator(weight=np.zeros(270), model="big", shape=AttentionShape("llama", 30, 9), alpha=1.0,
                        quality={}, recipe={}, seed=0, training_hash="0" * 64)
    foreign.save(tmp_path / "big.npz")
    with pytest.raises(ss.SalienceError, match="fitted on 'big'.*calibrate"):
        segment_salience(llama, PROMPT, TARGET, "attention_attribution", granularity="sentence",
                            config=AblationConfig(attention_estimator=str(tmp_path / "big.npz")))


def test_the_lit_segment_job_of_a_model_without_an_estimator_is_a_request_error_naming_calibrate(llama):
    from lit_app import errors  # pylint: disable=import-outside-toplevel
    from lit_app.schema import fields, method_registry
    from lit_app.serving import model_group
    from lit_app.model import shared_model
    from tests.unit.waiting import wait_until  # pylint: disable=import-outside-toplevel

    shared = shared_model.SharedLM(llama, max_new_tokens=4, disk_cache=False)
    model = model_group.lit_models(shared, "tiny")["_tiny_salience"]
    data = {"prompt": PROMPT, "target": TARGET, "chat": False, fields.DETAIL: method_registry.SEGMENT_DETAIL,
            fields.SEGMENT_METHOD: "attention_attribution"}
    caught = []

    def failed() -> bool:
        try:
            model.predict([data])
        except errors.RequestError as e:
            caught.append(str(e))
            return True
        return False

    try:
        wait_until(failed, "the attention_attribution segment job")
    finally:
        shared.jobs.cancel_all()
    assert "sequence-salience calibrate --model" in caught[0] and '"segment_method"' in caught[0]


def test_the_servers_attention_estimator_flag_reaches_the_lit_segment_job(llama, tmp_path):
    from lit_app.schema import fields, method_registry  # pylint: disable=import-outside-toplevel
    from lit_app.serving import model_group, server_flags
    from lit_app.model import shared_model
    from tests.unit.waiting import wait_until  # pylint: disable=import-outside-toplevel

    saved_random_estimator(llama, tmp_path / "served.npz", seed=4, quality={"cv_r2": 0.3})
    args = server_flags.parse(["--attention_estimator", str(tmp_path / "served.npz")])
    shared = shared_model.SharedLM(llama, max_new_tokens=4, disk_cache=False,
                                   ablation_config=AblationConfig(attention_estimator=args.attention_estimator))
    model = model_group.lit_models(shared, "tiny")["_tiny_salience"]
    data = {"prompt": PROMPT, "target": TARGET, "chat": False, fields.DETAIL: method_registry.SEGMENT_DETAIL,
            fields.SEGMENT_METHOD: "attention_attribution"}
    answer = {}

    def done() -> bool:
        answer["out"] = model.predict([data])[0][fields.SALIENCE]
        return answer["out"]["detail"]["state"] == "done"

    try:
        wait_until(done, "the attention_attribution segment job")
    finally:
        shared.jobs.cancel_all()
    want = segment_salience(llama, llama.format_prompt(PROMPT, chat=False), TARGET, "attention_attribution",
                            granularity="sentence", config=AblationConfig(attention_estimator=str(tmp_path / "served.npz")))
    np.testing.assert_allclose(answer["out"][fields.SEGMENTS]["values"], want.values, rtol=1e-5, atol=1e-7)
    assert server_flags.parse([]).attention_estimator is None
