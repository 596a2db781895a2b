"""First highlight in a real browser: click the chain-of-thought row -> first streamed token -> first coloured
segment, next to LIT's own HFGenerativeModel generation + HFSalienceModel whole-response span on the same prompt.

    python benchmarks/bench_first_highlight_browser.py [--runs 3] [--no_lit]

Each run starts the real server (`python -m lit_app.server`, default model) with a fresh cache dir
(the converted model folder linked into it, so only the generation cache is new: generation really
runs), opens the page in Debian Chromium (Playwright, headless), clicks the row and records, in page
time (`performance.now()`, 0 = the click):

* every `/get_preds` request (model, sent, answered), from a fetch wrapper installed before LIT's code;
* the first change of the module showing streamed response text (`.response.streaming` non-empty; a
  MutationObserver, no per-frame polling);
* the frame after a coloured prompt segment (`.prompt .seg[style*=background]`) entered the DOM.

LIT's figures are measured in a subprocess (the same converted weights, loaded by LIT's
`lit_nlp.examples.prompt_debugging.transformers_lms` classes; its generation step is timed directly,
as LIT 1.3.1's `HFGenerativeModel.predict` fails on a single input) on the same templated prompt and
number of new tokens, between the browser runs, so that load changes hit both. Prints figures, medians and the ratio; asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.server_process import ServerProcess  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TAG = "prompt-salience-module"
ROW_TEXT = "A train leaves at 2:15 pm"

# Installed before any page script: records /get_preds requests and, from DOM changes, the first
# frame with streamed response text and the first frame with a coloured prompt segment.
PROBE_JS = r"""
(() => {
  const probe = window.__probe = {t0: null, requests: [], streamed: null, streamedText: '', painted: null,
                                  paintedFrame: null};
  const nativeFetch = window.fetch.bind(window);
  window.fetch = async function (input, init) {
    const url = typeof input === 'string' ? input : input.url;
    if (!url.includes('/get_preds')) return nativeFetch(input, init);
    const model = new URL(url, location.href).searchParams.get('model');
    let detail = '';
    try { const body = JSON.parse((init && init.body) || '{}'); detail = (body.inputs || []).map(
        (i) => (i.data && (i.data.detail || i.data.target_span) ? `${i.data.detail || ''}${i.data.target_span ? ' ' + i.data.target_span : ''}` : '')).join(','); } catch (e) {}
    const rec = {model, detail, sent: performance.now(), done: null, n: (init && init.body || '').length};
    probe.requests.push(rec);
    try { return await nativeFetch(input, init); } finally { rec.done = performance.now(); }
  };
  function find(root, sel) {
    const hit = root.querySelector(sel);
    if (hit) return hit;
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) { const r = find(el.shadowRoot, sel); if (r) return r; }
    }
    return null;
  }
  // Watches the module's DOM for changes (no per-frame work: a probe that polls every frame keeps a
  // headless page producing frames and costs the CPU this benchmark measures).
  function check(root) {
    if (probe.t0 === null) return;
    const now = performance.now();
    const s = root.querySelector('.response.streaming');
    if (probe.streamed === null && s && s.textContent.trim()) { probe.streamed = now; probe.streamedText = s.textContent; }
    if (probe.painted === null && root.querySelector('.prompt .seg[style*="background"]')) {
      probe.painted = now;  // committed to the DOM; the frame that shows it:
      requestAnimationFrame(() => { probe.paintedFrame = performance.now(); });
    }
  }
  const timer = setInterval(() => {
    const mod = find(document, '""" + TAG + r"""');
    if (!mod || !mod.shadowRoot) return;
    clearInterval(timer);
    const root = mod.shadowRoot;
    new MutationObserver(() => check(root)).observe(root, {subtree: true, childList: true, characterData: true,
                                                          attributes: true});
  }, 200);
})();
"""


def _tree_cpu_s(root: int, exclude: int | None = None) -> float:
    """CPU seconds (user + system) used so far by the live descendants of `root` (without `exclude`'s tree)."""
    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        parent[int(entry)] = int(fields[1])
        ticks[int(entry)] = int(fields[11]) + int(fields[12])
    total = 0
    for pid in ticks:
        p, inside = pid, False
        while p > 1:
            if p == exclude:
                break
            if p == root:
                inside = True
                break
            p = parent.get(p, 1)
        if inside and pid != root:
            total += ticks[pid]
    return total / os.sysconf("SC_CLK_TCK")


def _cpu_of(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")


def _server_marks(log: str, click_wall: float) -> dict:
    """From the server log (timestamps to the ms): when generation and the first span ended, in s after the click."""
    out: dict = {}
    for line in log.splitlines():
        m = _LOG_TIME.match(line)
        if not m:
            continue
        at = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000
        if at < click_wall - 0.01:
            continue
        g = re.search(r"Generated (\d+) tokens in ([\d.]+) s", line)
        if g and "generation_done_s" not in out:
            out.update(generation_done_s=round(at - click_wall, 3), generation_s=float(g.group(2)),
                       generated_tokens=int(g.group(1)))
        if "salience grad_norm+grad_x_input: 1/1" in line and "span_done_s" not in out:
            out["span_done_s"] = round(at - click_wall, 3)
    return out


def browser_run(args_extra: list[str], workdir: Path) -> dict:
    """One run on a fresh server with an empty generation cache; times relative to the click (s)."""
    from playwright import sync_api

    cache = workdir / "cache"
    cache.mkdir(parents=True)
    real = Path(os.environ.get("SEQUENCE_SALIENCE_CACHE") or
                Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sequence_salience")
    (cache / "converted").symlink_to(real / "converted")
    old = os.environ.get("SEQUENCE_SALIENCE_CACHE")
    os.environ["SEQUENCE_SALIENCE_CACHE"] = str(cache)
    try:
        server = ServerProcess(["--host", "127.0.0.1", *args_extra], workdir, own_client_root=False)
    finally:
        if old is None:
            os.environ.pop("SEQUENCE_SALIENCE_CACHE")
        else:
            os.environ["SEQUENCE_SALIENCE_CACHE"] = old
    with server, sync_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(workdir / "user-data"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1440, "height": 960})
        try:
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            page.set_default_timeout(300_000)
            page.add_init_script(PROBE_JS)
            page.goto(server.url)
            page.locator(TAG).wait_for(timeout=120_000)
            row = page.locator("data-table-module tbody tr", has_text=ROW_TEXT).first
            row.wait_for()
            time.sleep(1.0)  # let the page's start-up requests settle
            page.evaluate("() => { window.__probe.t0 = performance.now(); window.__probe.requests = []; }")
            me, server_pid = os.getpid(), server.proc.pid
            cpu0 = (_tree_cpu_s(me, exclude=server_pid), _tree_cpu_s(server_pid) + _cpu_of(server_pid))
            click_wall = time.time()
            row.click()
            page.wait_for_function("() => window.__probe.paintedFrame !== null", polling=100, timeout=900_000)
            cpu1 = (_tree_cpu_s(me, exclude=server_pid), _tree_cpu_s(server_pid) + _cpu_of(server_pid))
            time.sleep(0.5)
            probe = page.evaluate("() => window.__probe")
            response = page.locator(f"{TAG} .response").inner_text()
        finally:
            ctx.close()
        log = server.log_path.read_text()
    marks = _server_marks(log, click_wall)
    t0 = probe["t0"]
    rel = lambda v: None if v is None else round((v - t0) / 1000, 3)  # noqa: E731
    requests = [{"model": r["model"], "detail": r["detail"], "sent_s": rel(r["sent"]), "done_s": rel(r["done"])}
                for r in probe["requests"] if r["sent"] >= t0]
    quick = next((r for r in requests if r["detail"] == "span"), None)
    return {"request_sent_s": quick and quick["sent_s"], "generation_done_s": marks.get("generation_done_s"),
            "generation_s": marks.get("generation_s"), "generated_tokens": marks.get("generated_tokens"),
            "span_done_s": marks.get("span_done_s"),
            "answer_received_s": quick and quick["done_s"],
            "first_token_s": rel(probe["streamed"]), "first_highlight_s": rel(probe["paintedFrame"]),
            "browser_cpu_s": round(cpu1[0] - cpu0[0], 2), "server_cpu_s": round(cpu1[1] - cpu0[1], 2),
            "click_wall": click_wall, "streamed_text": probe["streamedText"], "response": response.strip(), "requests": requests,
            "server_log": [line for line in log.splitlines() if "generat" in line.lower() or "span" in line.lower()
                           or "salience" in line.lower()][-20:]}


def lit_run(prompt: str, max_new_tokens: int) -> dict:
    """LIT's own generation (HFGenerativeModel) + whole-response span (HFSalienceModel), seconds, in a subprocess
    (its own process, like the server: it must not share threads with this one)."""
    code = f"""
import json, time, sequence_salience as ss
from lit_nlp.examples.prompt_debugging import transformers_lms as t
lm = ss.load_model("default")
folder = lm.model.config._name_or_path
del lm
gen = t.HFGenerativeModel(model_name_or_path=folder)
sal = t.HFSalienceModel(model_name_or_path=folder)
tok = sal.tokenizer
prompt = {json.dumps(prompt)}
chat = tok.apply_chat_template([{{"role": "user", "content": prompt}}], tokenize=False, add_generation_prompt=True)
gen.max_length = len(tok(chat)["input_ids"]) + {max_new_tokens}  # LIT counts prompt + new tokens
c0 = time.process_time()
t0 = time.perf_counter()
# LIT 1.3.1's predict() fails on a batch of one after generating (ntok_in is built as [batch, ntok_in]: "Batch
# length of predictions should be same"), so its generation step is timed directly.
out = gen._get_batched_outputs([{{"prompt": chat}}])
t1 = time.perf_counter()
target = out["response"][0]
c1 = time.process_time()
n_prompt = len(tok(chat)["input_ids"]); n_total = len(tok(chat + target)["input_ids"])
list(sal.predict([{{"prompt": chat, "target": target, "target_mask": [0] * n_prompt + [1] * (n_total - n_prompt)}}]))
t2 = time.perf_counter()
c2 = time.process_time()
print(json.dumps({{"generation_s": round(t1 - t0, 3), "span_s": round(t2 - t1, 3), "response": target,
                  "generation_cpu_s": round(c1 - c0, 2), "span_cpu_s": round(c2 - c1, 2),
                  "response_tokens": n_total - n_prompt}}))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.returncode != 0:
        raise SystemExit(f"LIT's models failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--no_lit", action="store_true", help="skip LIT's in-process reference")
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--verbose", action="store_true", help="print each run's requests and server log lines")
    args = p.parse_args()
    from lit_app import datasets

    row = next(r for r in datasets.load_jsonl(datasets.CASE_STUDIES_PATH) if r["prompt"].startswith(ROW_TEXT))
    print(f"load average before: {os.getloadavg()}")
    ours, lit = [], []
    for k in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-browser-") as tmp:
            r = browser_run(["--max_new_tokens", str(args.max_new_tokens)], Path(tmp))
        ours.append(r)
        print(f"run {k + 1}: click -> request sent {r['request_sent_s']} s -> generation done"
              f" {r['generation_done_s']} s (generation {r['generation_s']} s) -> first token shown {r['first_token_s']} s"
              f" -> span done {r['span_done_s']} s -> answer received {r['answer_received_s']} s -> first highlight"
              f" {r['first_highlight_s']} s; CPU until then: browser {r['browser_cpu_s']} s, server {r['server_cpu_s']} s")
        if args.verbose:
            print(json.dumps({key: r[key] for key in ("requests", "server_log")}, indent=1))
        if not args.no_lit:
            lit.append(lit_run(row["prompt"], args.max_new_tokens))
            print(f"  LIT: generation {lit[-1]['generation_s']} s ({lit[-1]['response_tokens']} tokens) + span"
                  f" {lit[-1]['span_s']} s, CPU {lit[-1]['generation_cpu_s']} + {lit[-1]['span_cpu_s']} s;"
                  f" ours generated {r['generated_tokens']} tokens")
    med = lambda xs: round(statistics.median(xs), 3) if xs else None  # noqa: E731
    summary = {
        "runs": args.runs,
        "first_token_s": med([r["first_token_s"] for r in ours if r["first_token_s"] is not None]),
        "first_highlight_s": med([r["first_highlight_s"] for r in ours]),
        "same_response_as_lit": all(r["response"] == lit_r["response"].strip() for r, lit_r in zip(ours, lit)),
    }
    if lit:
        summary["lit_generation_s"] = med([x["generation_s"] for x in lit])
        summary["lit_span_s"] = med([x["span_s"] for x in lit])
        summary["lit_total_s"] = med([x["generation_s"] + x["span_s"] for x in lit])
        summary["ratio_first_highlight_vs_lit"] = round(summary["first_highlight_s"] / summary["lit_total_s"], 2)
        # CPU time is less at the mercy of other processes than wall time on a shared machine.
        summary["server_cpu_to_first_highlight_s"] = med([r["server_cpu_s"] for r in ours])
        summary["lit_cpu_s"] = med([x["generation_cpu_s"] + x["span_cpu_s"] for x in lit])
        summary["ratio_cpu_vs_lit"] = round(summary["server_cpu_to_first_highlight_s"] / summary["lit_cpu_s"], 2)
    print(f"load average after: {os.getloadavg()}")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
