"""The server's command line (lit_app/serving/server_flags.py): our flags and LIT's, with LIT's meaning, and refusals.

No model is loaded: `server.parse_args` only parses (and checks the security flags).
"""

import json
import os
import subprocess
import sys

import pytest

from lit_nlp import server_flags as lit_server_flags

from lit_app.data import datasets
from lit_app.schema import fields
from lit_app.serving import layouts, server_flags
from lit_app import server
from lit_app.edge import tokens
from lit_app.model.shared_model import DEFAULT_MAX_NEW_TOKENS
from tests.server_process import REPO


def parse(*argv):
    return server_flags.parse(list(argv))


def refused(*argv) -> str:
    with pytest.raises(server_flags.FlagError) as e:
        parse(*argv)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_no_flags_serve_the_default_model_and_the_case_studies_as_before():
    args = parse()
    assert args.models == [("smollm2", "default")]
    assert args.datasets == [] and args.data is None
    assert (args.host, args.port, args.max_new_tokens, args.device, args.dtype) == (
        "127.0.0.1", 5432, DEFAULT_MAX_NEW_TOKENS, "cpu", "float32")
    assert args.lit_app_kwargs["default_layout"] == layouts.DEFAULT_LAYOUT
    assert args.lit_app_kwargs["page_title"] == server.PAGE_TITLE
    assert args.data_dir is None and args.allowed_hosts == [] and not args.no_token


def test_our_existing_flags_keep_their_meaning():
    args = parse("--model", "/m/qwen", "--port", "6001", "--max_new_tokens", "8", "--dtype", "bfloat16",
                 "--data", "p.jsonl", "--allowed_hosts", "a.example,b.example:80", "--allowed_hosts", "c",
                 "--token", "0123456789", "--max_ig_steps", "20", "--slice_s", "0.2", "--device_map", "auto")
    assert args.models == [("qwen", "/m/qwen")]
    assert (args.port, args.max_new_tokens, args.dtype, args.data, args.slice_s) == (6001, 8, "bfloat16", "p.jsonl", 0.2)
    assert args.allowed_hosts == ["a.example,b.example:80", "c"] and args.token == "0123456789"
    assert args.max_ig_steps == 20 and args.device_map == "auto"
    assert parse("--port=7").port == 7  # absl's --flag=value form too


def test_lit_models_flag_takes_name_path_pairs_and_bare_paths():
    args = parse("--models", "a:default,b:/tmp/tiny llama,org/name")
    assert args.models == [("a", "default"), ("b", "/tmp/tiny llama"), ("name", "org/name")]
    assert parse("--models=gemma:default").models == [("gemma", "default")]
    assert "twice" in refused("--models", "a:default,a:/x")
    assert "--models" in refused("--models", "a:default,,b:/x")
    assert "--model and --models" in refused("--model", "default", "--models", "a:default")


def test_lit_datasets_and_max_examples():
    args = parse("--datasets", "mine:/d/p.jsonl,sample_prompts,case_studies,/d/more.txt,case_study_variants",
                 "--max_examples", "3")
    assert args.datasets == [("mine", "/d/p.jsonl"), ("sample_prompts", datasets.LIT_SAMPLE_PATH),
                             ("case_studies", datasets.CASE_STUDIES_PATH), ("more", "/d/more.txt"),
                             ("case_study_variants", datasets.VARIANTS_PATH)]
    assert args.max_examples == 3
    assert parse().max_examples == server_flags.DEFAULT_MAX_EXAMPLES == 1000  # LIT's default
    assert "--max_examples" in refused("--max_examples", "0")
    assert "twice" in refused("--datasets", "a:x.jsonl,a:y.jsonl")


def test_lit_server_flags_are_accepted_with_lit_meaning():
    # Every flag of lit_nlp/server_flags.py is defined, with LIT's type.
    fv = server_flags.make_flag_values()
    for name in lit_server_flags.get_flag_holders():
        assert name in fv, name
    args = parse("--demo_mode", "--page_title", "Two models", "--canonical_url", "https://x.example/",
                 "--development_demo", "--default_layout", layouts.SIMPLE_LAYOUT_NAME, "--strict_cache_id_validation",
                 "--server_type", "default", "--warm_start", "0.5", "--validate", "off", "--report_all",
                 "--enforce_dataset_fields_required", "--alsologtostderr", "--dl_framework", "transformers",
                 "--dl_runtime", "torch")
    assert args.lit_app_kwargs == {
        "demo_mode": True, "default_layout": layouts.SIMPLE_LAYOUT_NAME, "canonical_url": "https://x.example/",
        "page_title": "Two models", "development_demo": True, "strict_cache_id_validation": True}
    # --precision is --dtype (LIT's two values).
    assert parse("--precision", "bfloat16").dtype == "bfloat16"
    assert parse("--precision", "float32", "--dtype", "float32").dtype == "float32"
    assert "contradict" in refused("--precision", "bfloat16", "--dtype", "float32")


@pytest.mark.parametrize("argv, flag", [
    (["--server_type", "external"], "--server_type"),
    (["--warm_projections"], "--warm_projections"),
    (["--validate", "first"], "--validate"),
    (["--batch_size", "4"], "--batch_size"),
    (["--dl_framework", "kerasnlp"], "--dl_framework"),
    (["--dl_runtime", "tensorflow"], "--dl_runtime"),
    (["--sequence_length", "512"], "--sequence_length"),
])
def test_unsupported_lit_flags_are_refused_with_a_reason(argv, flag):
    msg = refused(*argv)
    assert msg.startswith(flag) and "not supported" in msg and len(msg) > 60


@pytest.mark.parametrize("argv, flag", [
    (["--port", "x"], "--port"),
    (["--port", "70000"], "--port"),
    (["--max_new_tokens", "0"], "--max_new_tokens"),
    (["--slice_s", "0"], "--slice_s"),
    (["--warm_start", "1.5"], "--warm_start"),
    (["--precision", "float16"], "--precision"),
    (["--default_layout", "nope"], "--default_layout"),
    (["--no_token", "--host", "0.0.0.0"], "--no_token"),
    (["--bogus", "1"], "bogus"),
])
def test_bad_values_name_the_flag_in_one_line(argv, flag):
    assert flag in refused(*argv)


# The token variable's value in the one `--help` run below (never printed: the --token test).
ENV_SECRET = "env-token-9f3e1c77"


def _server_command(*argv: str) -> subprocess.CompletedProcess:
    """`python -m lit_app.server ARGV` in a process of its own, with $SEQUENCE_SALIENCE_TOKEN set to ENV_SECRET."""
    return subprocess.run([sys.executable, "-m", "lit_app.server", *argv], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env={**os.environ, tokens.TOKEN_ENV: ENV_SECRET})


@pytest.fixture(scope="module")
def helped() -> subprocess.CompletedProcess:
    """The command's `--help`, run once for the two tests that read it (each run imports the server: seconds of
    CPU)."""
    return _server_command("--help")


def test_command_line_help_lists_ours_and_lits_and_errors_exit_2(helped):
    """The command itself, in a process of its own: --help and a refused flag end the process (absl)."""
    assert helped.returncode == 0
    for label in (server_flags.OURS, server_flags.LIT_SERVER, server_flags.LIT_PROMPT_DEBUGGING):
        assert label in helped.stdout
    for flag in ("--model:", "--models:", "--datasets:", "--max_examples:", "--precision:", "--warm_start:",
                 "--default_layout:", "--token:", "--max_new_tokens:"):
        assert flag in helped.stdout, flag
    bad = _server_command("--batch_size", "4")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert bad.stderr.startswith("sequence-salience-server: error: --batch_size=4 is not supported")


def test_lit_prompt_debugging_jsonl_and_plain_text_are_read(tmp_path):
    lit_rows = [{"source": "fewshot", "prompt": "Q: 2+2?", "target": "4"}, {"prompt": "Hello"}]
    (tmp_path / "lit.jsonl").write_text("\n".join(json.dumps(r) for r in lit_rows) + "\n", encoding="utf-8")
    (tmp_path / "plain.txt").write_text("first prompt\n\nsecond prompt\nthird\n", encoding="utf-8")
    out = datasets.load_datasets([("lit", str(tmp_path / "lit.jsonl")), ("plain", str(tmp_path / "plain.txt")),
                                  ("sample_prompts", datasets.LIT_SAMPLE_PATH)], max_examples=2)
    assert list(out) == ["lit", "plain", "sample_prompts"]
    assert out["lit"].examples == [
        {fields.CASE: "fewshot", fields.PROMPT: "Q: 2+2?", fields.SYSTEM: "", fields.TARGET: "4"},
        {fields.CASE: "", fields.PROMPT: "Hello", fields.SYSTEM: "", fields.TARGET: ""}]
    assert [ex[fields.PROMPT] for ex in out["plain"].examples] == ["first prompt", "second prompt"]  # max 2
    assert len(out["sample_prompts"]) == 2 and all(ex[fields.CASE] for ex in out["sample_prompts"].examples)
    # LIT's sample file, in full: 12 rows, each with LIT's source as our case.
    full = datasets.load_datasets([("s", datasets.LIT_SAMPLE_PATH)])["s"]
    assert len(full) == 12
    # The default stays: the case studies and their variants, after the --data file.
    (tmp_path / "mine.jsonl").write_text('{"prompt": "p"}\n', encoding="utf-8")
    assert list(datasets.load_datasets([], str(tmp_path / "mine.jsonl"))) == ["mine", datasets.CASE_STUDIES_NAME,
                                                                          datasets.VARIANTS_NAME]
    with pytest.raises(datasets.DatasetError, match="unsupported format"):
        datasets.load_datasets([("x", str(tmp_path / "x.csv"))])


def test_token_help_warns_that_the_flag_shows_in_ps_and_never_prints_the_environment_token(helped):
    """--token is visible to every local user in `ps`; the help says so and names the variable, and
    (since the variable is no longer the flag's default) never prints the variable's value."""
    secret = ENV_SECRET
    assert helped.returncode == 0
    text = " ".join(helped.stdout.split())
    entry = text[text.index("--token:"):text.index("--token:") + 600]
    assert "`ps`" in entry and f"export {tokens.TOKEN_ENV}=" in entry, entry
    assert secret not in helped.stdout + helped.stderr
