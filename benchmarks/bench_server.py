"""Latency of the real LIT server: start to ready (cold and cached), first generation, first salience.

    python benchmarks/bench_server.py [--model default] [--skip_cold]

Starts `python -m lit_app.server` as a subprocess on a free port, waits for the
"ready" line, then times requests the UI makes. "Cold" uses an empty model
cache (SEQUENCE_SALIENCE_CACHE pointed at a temporary folder), so the default
model's GGUF is converted again; "cached" uses the normal cache. Prints figures;
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lit_app.schema import fields  # noqa: E402  pylint: disable=wrong-import-position
from lit_app import server

PROMPT = "What is the capital of France?"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, model: str, data: dict, auth: dict, timeout: float = 600) -> tuple[float, list]:
    body = json.dumps({"inputs": [{"id": "bench", "data": data}]}).encode()
    start = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(
        f"{url}get_preds?model={model}", data=body, headers={"Content-Type": "application/json", **auth}),
                                timeout=timeout) as r:
        preds = json.loads(r.read())
    return time.perf_counter() - start, preds


def start_server(model: str, env: dict, port: int) -> tuple[subprocess.Popen, float, list[str]]:
    """Starts the server; returns (process, seconds to the ready line, log lines; the last one has the URL)."""
    cmd = [sys.executable, "-m", "lit_app.server", "--model", model, "--port", str(port)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
        if "is ready:" in line:
            elapsed = time.perf_counter() - start
            # Keep draining the pipe so the server never blocks on a full buffer.
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, elapsed, lines
    raise RuntimeError("server exited before it was ready:\n" + "\n".join(lines[-30:]))


def bench(model: str, cold: bool) -> dict[str, float]:
    env = dict(os.environ)
    tmp = None
    if cold:
        tmp = tempfile.TemporaryDirectory(prefix="ss-cold-cache-")
        env["SEQUENCE_SALIENCE_CACHE"] = tmp.name
    port = _free_port()
    proc, ready, lines = start_server(model, env, port)
    url = f"http://127.0.0.1:{port}/"
    # The server requires the token printed in its ready URL (?token=...); scripts send it as a header.
    token = re.search(r"is ready: \S*\?token=(\w+)", lines[-1])
    auth = {"Authorization": f"token {token.group(1)}"} if token else {}
    gen, sal, _tok = fields.model_group_names(server.model_short_name(model))
    figures = {"start_to_ready_s": ready}
    try:
        t0 = time.perf_counter()
        urllib.request.urlopen(urllib.request.Request(url, headers=auth), timeout=60).read()
        figures["index_html_s"] = time.perf_counter() - t0
        figures["first_generation_s"], _ = _post(url, gen, {fields.PROMPT: PROMPT}, auth)
        # The UI's flow: salience of the response just generated (generation is reused).
        figures["first_salience_s"], preds = _post(url, sal, {fields.PROMPT: PROMPT}, auth)
        n_targets = len(preds[0][fields.SALIENCE]["target_logprobs"])
        figures["span_request_s"], _ = _post(url, sal, {fields.PROMPT: PROMPT, fields.TARGET_SPAN: f"0:{n_targets}"}, auth)
        # A fresh prompt with a typed target: salience alone, no generation.
        figures["salience_typed_target_s"], _ = _post(
            url, sal, {fields.PROMPT: "Name the largest planet.", fields.TARGET: "Jupiter is the largest planet."}, auth)
        figures["salience_ig16_s"], _ = _post(
            url, sal, {fields.PROMPT: "Name the largest planet.", fields.TARGET: "Jupiter is the largest planet.",
                       fields.IG_STEPS: 16}, auth)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        if tmp is not None:
            tmp.cleanup()
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="default")
    p.add_argument("--skip_cold", action="store_true", help="Only measure with the converted-model cache.")
    args = p.parse_args()
    runs = [("cached", False)] if args.skip_cold else [("cold", True), ("cached", False)]
    print(f"model={args.model}  cpu_count={os.cpu_count()}  load_avg={os.getloadavg()[0]:.1f}")
    for label, cold in runs:
        figures = bench(args.model, cold)
        print(f"[{label}] " + "  ".join(f"{k}={v:.2f}" for k, v in figures.items()), flush=True)


if __name__ == "__main__":
    main()
