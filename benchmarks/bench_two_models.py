"""Start-up time and memory of the real server with one model and with two side by side.

    python benchmarks/bench_two_models.py [--tiny_folder DIR]

Starts `python -m lit_app.server` (tests/server_process.py) three times, one after another:
`--model default`; `--models a:default,b:default` (the embedded model twice: two real copies, each
with its own lock and caches, standing in for a second 135M model); `--models a:default,b:<tiny>`
(a tiny random Llama over the default tokenizer, as the integration tests use). For each it prints
the seconds from process start to the "ready" line, the process's resident memory (RSS at ready and
after one fresh generation per model, with PSS and USS then) and the per-model lines the server logs
at start. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lit_app.schema import fields  # noqa: E402  pylint: disable=wrong-import-position
from tests.server_process import ServerProcess  # noqa: E402  pylint: disable=wrong-import-position

PROMPT = "What is the capital of France?"


def _run(label: str, args: list[str], names: list[str]) -> None:
    # A prompt no earlier run generated for (the server keeps generations on disk, by model identity).
    prompt = f"{PROMPT} ({label}, {time.time():.0f})"
    with tempfile.TemporaryDirectory() as work:
        start = time.perf_counter()
        with ServerProcess([*args, "--max_new_tokens", "8"], Path(work)) as proc:
            ready_s = time.perf_counter() - start
            ps = psutil.Process(proc.proc.pid)
            rss_ready = ps.memory_info().rss
            for name in names:
                status, _, body = proc.post_json(f"/get_preds?model={name}",
                                                 {"inputs": [{"id": "b", "data": {fields.PROMPT: prompt}}]})
                assert status == 200, body
            full = ps.memory_full_info()  # pss: shared file pages (the mmapped weights) split between mappings
            lines = [ln.split(": ", 1)[-1] for ln in proc.log_tail(20000).splitlines()
                     if re.search(r"MiB of weights", ln)]
    print(f"{label}: ready after {ready_s:.1f} s; RSS {rss_ready / 2**20:.0f} MiB at ready, "
          f"{full.rss / 2**20:.0f} MiB after one generation per model (PSS {full.pss / 2**20:.0f} MiB,"
          f" USS {full.uss / 2**20:.0f} MiB)")
    for ln in lines:
        print(f"    {ln}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny_folder", default=None, help="a saved tiny Llama (default: built in a temporary folder)")
    a = p.parse_args()
    tiny = a.tiny_folder
    tmp = None
    if tiny is None:
        import sequence_salience as ss  # pylint: disable=import-outside-toplevel
        from tests.unit.tiny_models import save_tiny_llama_for  # pylint: disable=import-outside-toplevel

        tmp = tempfile.TemporaryDirectory()
        tiny = save_tiny_llama_for(ss.load_model("default").tokenizer, os.path.join(tmp.name, "tiny"))
    _run("one model (--model default)", ["--model", "default"], ["smollm2"])
    _run("two models (--models a:default,b:default)", ["--models", "a:default,b:default"], ["a", "b"])
    _run("default + tiny Llama (--models a:default,b:<tiny>)", ["--models", f"a:default,b:{tiny}"], ["a", "b"])


if __name__ == "__main__":
    main()
