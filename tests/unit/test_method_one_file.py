"""A method is one file (issue 42, point 1): its record owns its settings, and every edge derives from the record.

* A toy counted token method and a toy counted segment method, declared in one module
  (tests/unit/toy_method.py) and registered in a fresh process, reach every edge: the configs, the CLI
  flags, the server's limits and flags, the LIT input specs, the request parser, the payload entry and the
  published registry; their values are checked against references (toy_scale times gradient x input;
  leave_one_out). No file of the library, the server or the browser spells their names.
* The reverse: no generic file names a registered method's settings (the fields of the records' `settings`
  dataclasses: ig_steps, smooth_grad_samples, refine_top_k, ...) in code; each reads them through the record.
  The few files whose purpose is one method's are listed, each with its reason, and must still name them.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re
import subprocess
import sys

import pytest

from sequence_salience.errors import SalienceError
from sequence_salience.methods import all_records, flagged_settings
from sequence_salience.methods.base import SalienceConfig, add_settings
from tests.unit import toy_method

REPO = pathlib.Path(__file__).resolve().parents[2]
PROMPT, TARGET = "The capital of France is", " Paris."


def _edges() -> None:
    """Run in a fresh process (tests below): registers the toy method, then imports the edges and checks them."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    import sequence_salience as ss  # pylint: disable=import-outside-toplevel
    from sequence_salience import field_rules  # pylint: disable=import-outside-toplevel

    default_before = ss.SalienceConfig()  # made before the toy registers: reads its defaults afterwards
    toy_method.register()
    from lit_app import errors  # pylint: disable=C0415
    from lit_app.schema import fields, inputs, method_registry
    from lit_app.edge import limits
    from lit_app.wrappers import payloads
    from lit_app.serving import server_flags  # pylint: disable=import-outside-toplevel
    from sequence_salience.cli import build_parser  # pylint: disable=import-outside-toplevel
    from sequence_salience.cli.common import run_settings, salience_config  # pylint: disable=C0415
    from tests.unit.tiny_models import tiny_llama, wrap  # pylint: disable=import-outside-toplevel

    rule, name = toy_method.DRAWS, toy_method.NAME
    # The configs: the count and the other setting, by keyword and attribute, in replace() and ==.
    assert (SalienceConfig().toy_draws, SalienceConfig().toy_scale) == (3, 2.0)
    assert (default_before.toy_draws, default_before.toy_scale) == (3, 2.0) and default_before == SalienceConfig()
    assert dataclasses.replace(SalienceConfig(toy_draws=5), toy_scale=0.5) == SalienceConfig(toy_draws=5, toy_scale=0.5)
    assert {"toy_draws", "toy_scale"} <= {f.name for f in dataclasses.fields(SalienceConfig)}  # saved JSON
    assert field_rules.RULES["toy_draws"] is rule and field_rules.TOY_DRAWS is rule
    # The CLI: the count's flag from its rule (range refused by argparse), the setting's flag from its metadata.
    parser = build_parser()
    args = parser.parse_args(["explain", "--prompt", "x", "--toy-draws", "5", "--toy-scale", "0.5",
                              "--method", name])
    assert (args.toy_draws, args.toy_scale) == (5, 0.5)
    assert parser.parse_args(["explain", "--prompt", "x"]).toy_draws == 3
    assert (salience_config(args).toy_draws, salience_config(args).toy_scale) == (5, 0.5)
    assert run_settings(args, (name,))["toy_draws"] == 5 and "toy_draws" not in run_settings(args, ("grad_norm",))
    assert parser.parse_args(["compare", "--prompt-a", "a", "--toy-draws", "12"]).toy_draws == 12
    try:
        parser.parse_args(["explain", "--prompt", "x", "--toy-draws", "13"])
        raise AssertionError("--toy-draws 13 was accepted")
    except SystemExit:
        pass
    # The server: a limit and a flag per count (--max_toy_draws), the HTTP check naming both.
    assert limits.Limits().max_toy_draws == 12 and limits.Limits(max_toy_draws=4).max_toy_draws == 4
    assert server_flags.parse(["--max_toy_draws", "6"]).max_toy_draws == 6
    try:
        limits.validate_example({"toy_draws": 5}, limits.Limits(max_toy_draws=4), "inputs[0]")
        raise AssertionError("toy_draws 5 passed a limit of 4")
    except errors.Rejected as e:
        assert '"toy_draws"' in e.message and "--max_toy_draws" in e.message, e.message
    # The LIT specs and the request parser: 0 = off, the rule's maximum.
    for spec in (fields.SALIENCE_INPUT_SPEC, fields.COMPARE_INPUT_SPEC):
        assert (spec["toy_draws"].default, spec["toy_draws"].max_val) == (0, 12)
    assert inputs.extra_counts({"toy_draws": "4"})["toy_draws"] == 4
    assert f"{name}_matrix" in inputs.DETAIL_MODES
    # The published registry (the browser's only source): the record's facts, the rule's range, the job facts.
    entry = next(m for m in method_registry.published_registry() if m["name"] == name)
    assert (entry["count_field"], entry["count_unit"], entry["default_count"], entry["max_count"]) == \
        ("toy_draws", "samples", 3, 12)
    assert (entry["tag"], entry["matrix_detail"], entry["label"], entry["kind"]) == \
        (name, f"{name}_matrix", "Toy scaled gradient", "token")
    # The engine and the payload: values against the hand-derived reference (toy_scale x gradient x input).
    lm = wrap(tiny_llama(seed=0), "llama")
    result = ss.compute_salience(lm, PROMPT, TARGET, methods=("grad_x_input", name), config=SalienceConfig())
    gxi, toy = result.matrices["grad_x_input"], result.matrices[name]
    np.testing.assert_allclose(toy, 2.0 * gxi, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(result.extras[toy_method.TOTAL], toy.sum(-1), rtol=1e-6, atol=1e-9)
    payload = payloads.salience_payload(result, counts={"toy_draws": 3})["methods"][name]
    assert set(payload) == {"signed", "matrix", "samples", toy_method.TOTAL} and payload["samples"] == 3
    np.testing.assert_allclose(payload[toy_method.TOTAL], toy.sum(-1), rtol=1e-5)
    _segment_edges(lm)
    print("EDGES OK")


def _segment_edges(lm) -> None:
    """The toy segment method's edges (after _edges registered it): its count in AblationConfig, its CLI flag, the
    segment inputs' LIT spec, the HTTP range check, the request parser, the published registry, its values."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    from lit_app import errors  # pylint: disable=import-outside-toplevel
    from lit_app.schema import fields, inputs, method_registry
    from lit_app.edge import limits
    from sequence_salience.ablation import segment_salience  # pylint: disable=import-outside-toplevel
    from sequence_salience.cli import build_parser  # pylint: disable=import-outside-toplevel
    from sequence_salience.cli.common import ablation_config, run_settings  # pylint: disable=C0415
    from sequence_salience.methods import AblationConfig  # pylint: disable=import-outside-toplevel

    name = toy_method.SEGMENT_NAME
    assert AblationConfig().toy_rounds == 2 and AblationConfig(toy_rounds=3).toy_rounds == 3
    args = build_parser().parse_args(["explain", "--prompt", "x", "--toy-rounds", "4", "--toy-label", "a",
                                      "--method", name])
    assert (ablation_config(args).toy_rounds, ablation_config(args).toy_label) == (4, "a")
    assert run_settings(args, (name,))["toy_rounds"] == 4 and run_settings(args, (name,))["toy_label"] == "a"
    # Its flagged setting is a server flag too, checked by its own rule.
    assert "toy_label" in {s.name for s in method_registry.SERVER_SETTINGS}
    assert method_registry.server_ablation_settings({"toy_label": "a"})["toy_label"] == "a"
    try:
        method_registry.server_ablation_settings({"toy_label": "bad"})
        raise AssertionError("the toy's check let 'bad' pass")
    except SalienceError as e:
        assert str(e).startswith("--toy_label: ") and "Fix" in str(e), e
    for spec in (fields.SALIENCE_INPUT_SPEC, fields.COMPARE_INPUT_SPEC):
        assert (spec["toy_rounds"].default, spec["toy_rounds"].min_val, spec["toy_rounds"].max_val) == (2, 1, 9)
    try:
        limits.validate_example({"toy_rounds": 10}, limits.Limits(), "inputs[0]")
        raise AssertionError("toy_rounds 10 passed its rule (1 to 9)")
    except errors.Rejected as e:
        assert '"toy_rounds"' in e.message and "1 to 9" in e.message, e.message
    request = inputs.segment_request({fields.SEGMENT_METHOD: name, "toy_rounds": 3, fields.GRANULARITY: "sentence"})
    assert request.count == 3
    entry = next(m for m in method_registry.published_registry() if m["name"] == name)
    assert (entry["kind"], entry["count_field"], entry["count_unit"], entry["default_count"], entry["max_count"],
            entry["detail"]) == ("segment", "toy_rounds", "rounds", 2, 9, method_registry.SEGMENT_DETAIL)
    prompt = "The sky is blue. Grass is green. Snow is white."
    toy = segment_salience(lm, prompt, " Blue.", name, config=AblationConfig(toy_rounds=2))
    loo = segment_salience(lm, prompt, " Blue.", "leave_one_out")
    np.testing.assert_allclose(toy.values, loo.values, rtol=1e-6, atol=1e-9)
    assert len(toy.values) == 3


def test_a_toy_method_in_one_module_reaches_every_edge():
    code = "from tests.unit.test_method_one_file import _edges; _edges()"
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "EDGES OK" in run.stdout, run.stderr[-4000:]


def test_no_file_but_the_toy_module_spells_the_toy_methods_names():
    """The toy reached the edges above by derivation alone: its names are in its own module and these tests."""
    names = ("toy_draws", "toy_scale", "toy_scaled_gradient", "toy_total", "TOY_DRAWS", "toy_rounds",
             "toy_repeated_loo", "toy_label")
    here = {pathlib.Path(toy_method.__file__).resolve(), pathlib.Path(__file__).resolve()}
    spelled = [f"{p.relative_to(REPO)}: {n}" for p in _source_files(("py", "ts")) if p.resolve() not in here
               for n in names if n in p.read_text(encoding="utf-8")]
    assert spelled == []


# ---------------------------------------------------------------------------
# The checker: no generic file names a method's settings.

# Every file of the library, the server and the browser's sources, but the method modules themselves
# (sequence_salience/methods/ holds them and their shared maths; its registry and base types are generic).
GENERIC_METHOD_FILES = ("__init__.py", "base.py")
# Files whose purpose is one method's, with the settings they name and why (each must still name them).
ALLOWED: dict[str, tuple[frozenset[str], str]] = {
    "sequence_salience/explain/ig_quality.py": (frozenset({"ig_steps"}), "IG's auto-steps test: it runs IG"
                                                " at doubling step counts"),
    "sequence_salience/evaluate/engine.py": (frozenset({"ig_steps"}), "EvalConfig carries IG's steps for its"
                                             " IG completeness report (its flags come from the record)"),
    "lit_app/wrappers/explain.py": (frozenset({"ig_steps"}), "the explain model's IG auto-steps test names its stage"),
    "frontend/src/explain/logic.ts": (frozenset({"ig_steps"}), "the explain module's IG auto-steps test (its"
                                      " request field and stage)"),
    "sequence_salience/calibration.py": (frozenset({"surrogate_masks"}), "the attention estimator's"
                                         " calibration draws its random ablations with the surrogate's masks"),
}


def settings_names() -> set[str]:
    """The fields of every registered method's settings dataclass."""
    return {f.name for m in all_records() if m.settings for f in dataclasses.fields(m.settings)}


def _source_files(exts: tuple[str, ...]) -> list[pathlib.Path]:
    found = []
    for top, ext in (("sequence_salience", "py"), ("lit_app", "py"), ("frontend/src", "ts")):
        if ext in exts:
            found += sorted((REPO / top).rglob(f"*.{ext}"))
    return [p for p in found if "node_modules" not in p.parts]


def generic_files() -> list[pathlib.Path]:
    return [p for p in _source_files(("py", "ts"))
            if not (p.parent == REPO / "sequence_salience" / "methods" and p.name not in GENERIC_METHOD_FILES)]


def _named(text: str, names: set[str]) -> list[str]:
    """The `names` in `text`, each where no letter or digit touches it (so "max_ig_steps" and "--ig-steps"'s
    field "ig_steps" count, "ig_step_chunk_size" does not count as "ig_steps")."""
    return [n for n in sorted(names) if re.search(rf"(?<![A-Za-z0-9]){n}(?![A-Za-z0-9])", text)]


def python_code_names(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name), in line order, for each of `names` in Python code: in an identifier, attribute, keyword or
    parameter, or in a string that is not a docstring (a message, a dict key, a flag). Comments and docstrings
    are prose."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            words = [node.attr]
        elif isinstance(node, ast.keyword):
            words = [node.arg] if node.arg else []
        elif isinstance(node, ast.Name):
            words = [node.id]
        elif isinstance(node, ast.arg):
            words = [node.arg]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words = [node.value]
        else:
            words = []
        hits += [(node.lineno, n) for w in words for n in _named(w, names)]
    return sorted(hits)


def typescript_code_names(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) for each of `names` as a whole word in TypeScript code, comments removed."""
    code = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), source, flags=re.S)
    code = re.sub(r"//[^\n]*", "", code)
    return [(i, n) for i, line in enumerate(code.splitlines(), 1) for n in _named(line, names)]


def code_names(path: pathlib.Path, names: set[str]) -> list[tuple[int, str]]:
    source = path.read_text(encoding="utf-8")
    return (python_code_names if path.suffix == ".py" else typescript_code_names)(source, names)


def test_the_checker_is_not_vacuous():
    names = settings_names()
    # The settings it looks for come from the records, and include the ones the issue names.
    assert {"ig_steps", "ig_baseline", "ig_rule", "smooth_grad_samples", "smooth_grad_noise", "smooth_grad_seed",
            "surrogate_masks", "refine_top_k", "attention_estimator"} <= names
    # It reads the generic files, the eight of the issue among them.
    scanned = {str(p.relative_to(REPO)) for p in generic_files()}
    assert {"sequence_salience/methods/base.py", "sequence_salience/methods/__init__.py",
            "sequence_salience/cli/common.py", "sequence_salience/cli/parser.py", "sequence_salience/field_rules.py",
            "sequence_salience/display/view.py", "lit_app/edge/limits.py", "lit_app/schema/fields.py", "lit_app/wrappers/payloads.py",
            "lit_app/schema/method_registry.py", "frontend/src/shared/methods.ts"} <= scanned
    assert not any(p.endswith("integrated_gradients.py") for p in scanned)
    # It finds a name in code, in a message and in TypeScript, and not in prose.
    planted = ('c = replace(config, ig_steps=3)\nx = cfg.refine_top_k\nraise E(f"use --max_smooth_grad_samples {n}")\n'
               'n = c.ig_step_chunk_size\n')
    assert python_code_names(planted, names) == [(1, "ig_steps"), (2, "refine_top_k"), (3, "smooth_grad_samples")]
    prose = '"""Doc: ig_steps."""\n# ig_steps\ndef f():\n    """ig_steps"""\n'
    assert python_code_names(prose, names) == []
    assert typescript_code_names("// ig_steps\nconst n = m.ig_steps; /* refine_top_k */", names) == [(2, "ig_steps")]
    # The method modules themselves do name their settings (the names are real, and found where they belong).
    methods = REPO / "sequence_salience" / "methods"
    assert ("ig_steps" in {w for _, w in code_names(methods / "integrated_gradients.py", names)}
            and "refine_top_k" in {w for _, w in code_names(methods / "coarse_to_fine.py", names)})


def test_no_generic_file_names_a_methods_settings():
    names = settings_names()
    found: dict[str, set[str]] = {}
    stray = []
    for path in generic_files():
        rel = str(path.relative_to(REPO))
        allowed = ALLOWED.get(rel, (frozenset(), ""))[0]
        for line, name in code_names(path, names):
            found.setdefault(rel, set()).add(name)
            if name not in allowed:
                stray.append(f"{rel}:{line}: {name}")
    assert stray == [], ("read a method's settings through its record (methods/base.py: `settings`, `count`), "
                         "not by name")
    # Each exception is still needed (the list shrinks as files stop naming a method's settings).
    assert {rel: set(allowed) for rel, (allowed, _) in ALLOWED.items()} == \
        {rel: found.get(rel, set()) & set(allowed) for rel, (allowed, _) in ALLOWED.items()}


def test_the_server_checks_a_segment_methods_flagged_settings_through_the_record(tmp_path):
    from lit_app.schema import method_registry  # pylint: disable=import-outside-toplevel

    names = {s.name for s in method_registry.SERVER_SETTINGS}
    assert names == {f.name for _, f in flagged_settings(("segment",))} and "attention_estimator" in names
    assert method_registry.server_ablation_settings({}) == {s.name: s.default for s in method_registry.SERVER_SETTINGS}
    missing = tmp_path / "no_estimator.npz"
    with pytest.raises(SalienceError, match=rf"^--attention_estimator: No attention estimator at {missing}.*Fix"):
        method_registry.server_ablation_settings({"attention_estimator": str(missing)})


# ---------------------------------------------------------------------------
# add_settings on its own.

def test_a_settings_name_already_taken_is_refused_with_the_fix():
    @dataclasses.dataclass(frozen=True)
    class Clash:
        backward: str = "loop"

    with pytest.raises(SalienceError, match=r"\['backward'\] are already SalienceConfig fields.*Fix"):
        add_settings(SalienceConfig, Clash, "clash")

    @dataclasses.dataclass(frozen=True)
    class NoDefault:
        toy_required: int

    with pytest.raises(SalienceError, match=r"\['toy_required'\] have no default.*Fix"):
        add_settings(SalienceConfig, NoDefault, "nodefault")
    assert "toy_required" not in {f.name for f in dataclasses.fields(SalienceConfig)}


def test_add_settings_extends_a_config_class_in_place():
    @dataclasses.dataclass(frozen=True)
    class Base:
        a: int = 1

    @dataclasses.dataclass(frozen=True)
    class Own:
        b: float = 0.5

    before = Base()
    add_settings(Base, Own, "own")
    assert [f.name for f in dataclasses.fields(Base)] == ["a", "b"]
    assert (before.b, Base(b=2.0).b, Base(a=3, b=1.0)) == (0.5, 2.0, Base(a=3, b=1.0))
    assert before == Base() and hash(before) == hash(Base()) and Base(b=1.0) != Base()
    assert dataclasses.replace(Base(a=2), b=4.0) == Base(a=2, b=4.0) and repr(Base()).endswith("Base(a=1, b=0.5)")
    with pytest.raises(dataclasses.FrozenInstanceError):
        Base().b = 1.0
