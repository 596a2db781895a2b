"""First highlight in a real browser: click the chain-of-thought row -> first streamed token -> first coloured
segment, next to LIT's own HFGenerativeModel generation + HFSalienceModel whole-response span on the same prompt,
with where the CPU goes while the model generates.

    python benchmarks/bench_first_highlight_browser.py [--runs 3] [--variants browser,lit] [--no_build]

It first builds the module's bundle from frontend/src (`npm run build`, under a second): a page served
from an older bundle measures old code (a stale frontend/dist once made every run show no streamed
token and the endless animations the page had lost). Each run of a browser variant starts the real server
(`python -m lit_app.server`, default model) with a fresh cache dir (the converted model folder linked
into it, so only the generation cache is new: generation really runs), opens the page in Debian
Chromium (Playwright, headless), clicks the row and records, in page time (`performance.now()`, 0 = the
click):

* every `/get_preds` request (model, detail, sent, answered), from a fetch wrapper installed before LIT's code;
* the first change of the module showing streamed response text (`.response.streaming` non-empty; a
  MutationObserver, no per-frame polling);
* the frame after a coloured prompt segment (`.prompt .seg[style*=background]`) entered the DOM; the
  script waits for it on a promise (no polling from Playwright).

The server log gives when generation and the span ended; CPU seconds are read from /proc at the click,
when generation ended and at the first highlight: the server's process, and the browser's processes by
kind (browser, renderer, gpu, utility, the Playwright driver).

Variants (`--variants`, in this order within each run, so that load changes hit all of them):
  browser           the page as shipped (streams the response with `detail="stream"` polls)
  browser_nostream  the same page, the stream polls answered in the page by an empty answer (no streaming)
  browser_noprobe   the page as shipped without the probe's MutationObserver (its own cost; no page times)
  http              the first-highlight request sent over HTTP from this script, no browser, no polls
  http_polls        the same, with `detail="stream"` polls from this script at the module's rate
  lit               LIT's generation + span in a subprocess (its generation step is timed directly, as LIT
                    1.3.1's `HFGenerativeModel.predict` fails on a single input)
The http variants replay the requests the first browser run sent. Prints figures, medians and ratios
against the same run's LIT figures; asserts nothing.
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
import threading
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
STREAM_POLL_S = 0.25  # the module's stream poll interval (frontend/src: STREAM_MS), for http_polls
VARIANTS = ("browser", "browser_nostream", "browser_noprobe", "http", "http_polls", "lit")

# Installed before any page script: records /get_preds requests (and the body of the first of each kind,
# for the http variants); in "nostream" mode answers the stream polls in the page with an empty answer (the
# module then stops polling, as with a server without streaming); unless "noprobe", watches the module's DOM
# for the first streamed text and the first coloured prompt segment, and resolves `done` on the frame after.
PROBE_JS = r"""
(() => {
  const MODE = '__MODE__';
  let resolveDone;
  const probe = window.__probe = {t0: null, requests: [], bodies: {}, streamed: null, streamedText: '', painted: null,
                                  paintedFrame: null, done: new Promise((r) => { resolveDone = r; })};
  const nativeFetch = window.fetch.bind(window);
  window.fetch = async function (input, init) {
    const url = typeof input === 'string' ? input : input.url;
    if (!url.includes('/get_preds')) return nativeFetch(input, init);
    const model = new URL(url, location.href).searchParams.get('model');
    const body = (init && init.body) || '';
    let detail = '';
    try { detail = (JSON.parse(body || '{}').inputs || []).map(
        (i) => (i.data && (i.data.detail || i.data.target_span) ? `${i.data.detail || ''}${i.data.target_span ? ' ' + i.data.target_span : ''}` : '')).join(','); } catch (e) {}
    if (probe.t0 !== null && !(detail in probe.bodies)) probe.bodies[detail] = {url, body};
    const rec = {model, detail, sent: performance.now(), done: null};
    probe.requests.push(rec);
    if (MODE === 'nostream' && detail === 'stream') { rec.done = rec.sent; return new Response('[{}]', {status: 200}); }
    try { return await nativeFetch(input, init); } finally { rec.done = performance.now(); }
  };
  if (MODE === 'noprobe') return;
  function find(root, sel) {
    const hit = root.querySelector(sel);
    if (hit) return hit;
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) { const r = find(el.shadowRoot, sel); if (r) return r; }
    }
    return null;
  }
  function check(root) {
    if (probe.t0 === null || probe.painted !== null) return;
    const now = performance.now();
    const s = root.querySelector('.response.streaming');
    if (probe.streamed === null && s && s.textContent.trim()) { probe.streamed = now; probe.streamedText = s.textContent; }
    if (root.querySelector('.prompt .seg[style*="background"]')) {
      probe.painted = now;  // committed to the DOM; the frame that shows it:
      requestAnimationFrame(() => { probe.paintedFrame = performance.now(); resolveDone(); });
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


# ----------------------------------------------------------------------------------------------- CPU


def _ticks(stat: str) -> tuple[int, int]:
    """(parent pid, user + system clock ticks) from a /proc/<pid>/stat line."""
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[11]) + int(fields[12])


def _kind(pid: int) -> str:
    try:
        # Chromium's child processes rewrite their argv into one space-separated string.
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    exe = os.path.basename(cmd.split(" ", 1)[0])
    if "chrom" in exe:
        m = re.search(r"--type=(\S+)", cmd)
        kind = m.group(1) if m else "browser"
        return {"gpu-process": "gpu"}.get(kind, kind)
    return "driver" if exe == "node" or "playwright" in cmd else exe or "other"


def cpu_snapshot(me: int, server_pid: int | None) -> dict[str, float]:
    """CPU seconds used so far: this script's descendants by kind (not the server), and the server's process
    (all its threads, the exited ones included)."""
    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            parent[int(entry)], ticks[int(entry)] = _ticks(Path(f"/proc/{entry}/stat").read_text())
        except (OSError, ValueError):
            continue
    hz = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for pid, t in ticks.items():
        p, inside = pid, False
        while p > 1:
            if p == server_pid:
                break
            if p == me:
                inside = True
                break
            p = parent.get(p, 1)
        if inside and pid != me:
            kind = _kind(pid)
            out[kind] = out.get(kind, 0.0) + t / hz
    if server_pid is not None:
        out["server"] = ticks.get(server_pid, 0) / hz
    return out


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each live thread of `pid`."""
    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[int(tid)] = _ticks(Path(f"/proc/{pid}/task/{tid}/stat").read_text())[1] / hz
        except (OSError, ValueError):
            continue
    return out


def diff(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: round(b.get(k, 0.0) - a.get(k, 0.0), 2) for k in sorted(set(a) | set(b))
            if abs(b.get(k, 0.0) - a.get(k, 0.0)) >= 0.005}


def browser_cpu(d: dict[str, float]) -> float:
    """Chromium's processes (not the server, nor Playwright's driver, which a user's browser does not have)."""
    return round(sum(v for k, v in d.items() if k not in ("server", "driver")), 2)


# ------------------------------------------------------------------------------------ server and log


_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")
_GENERATED = re.compile(r"Generated (\d+) tokens in ([\d.]+) s")
_SPAN_DONE = "salience grad_norm+grad_x_input: 1/1"


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
        g = _GENERATED.search(line)
        if g and "generation_done_s" not in out:
            out.update(generation_done_s=round(at - click_wall, 3), generation_s=float(g.group(2)),
                       generated_tokens=int(g.group(1)))
        if _SPAN_DONE in line and "span_done_s" not in out:
            out["span_done_s"] = round(at - click_wall, 3)
    return out


class Marks(threading.Thread):
    """Watches the server log (every 50 ms) and takes CPU snapshots when generation and the span end."""

    def __init__(self, server: ServerProcess, me: int):
        super().__init__(daemon=True)
        self.server, self.me = server, me
        self.snap: dict[str, dict[str, float]] = {}
        self.threads: dict[str, dict[int, float]] = {}
        self.stop = threading.Event()
        self.span_done = threading.Event()
        self.offset = server.log_path.stat().st_size

    def run(self) -> None:
        with open(self.server.log_path) as f:
            f.seek(self.offset)
            text = ""
            while not self.stop.is_set():
                text += f.read()
                if "gen" not in self.snap and _GENERATED.search(text):
                    self.snap["gen"] = cpu_snapshot(self.me, self.server.proc.pid)
                    self.threads["gen"] = thread_cpu(self.server.proc.pid)
                if "span" not in self.snap and _SPAN_DONE in text:
                    self.snap["span"] = cpu_snapshot(self.me, self.server.proc.pid)
                    self.span_done.set()
                    return
                time.sleep(0.05)


class FreshServer:
    """The real server with an empty generation cache (the converted model linked in), as a context manager."""

    def __init__(self, workdir: Path, args: list[str]):
        cache = workdir / "cache"
        cache.mkdir(parents=True)
        real = Path(os.environ.get("SEQUENCE_SALIENCE_CACHE") or
                    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sequence_salience")
        (cache / "converted").symlink_to(real / "converted")
        self.server = ServerProcess(["--host", "127.0.0.1", *args], workdir, own_client_root=False,
                                    env={**os.environ, "SEQUENCE_SALIENCE_CACHE": str(cache)})

    def __enter__(self) -> ServerProcess:
        return self.server.__enter__()

    def __exit__(self, *exc) -> None:
        self.server.__exit__(*exc)


def top_threads(before: dict[int, float], after: dict[int, float]) -> list[float]:
    """CPU seconds of the server's busiest threads between two snapshots (the generating thread and torch's)."""
    return sorted((round(after[t] - before.get(t, 0.0), 2) for t in after if after[t] - before.get(t, 0.0) >= 0.05),
                  reverse=True)[:4]


# -------------------------------------------------------------------------------------------- variants


def browser_run(args_extra: list[str], workdir: Path, mode: str) -> dict:
    """One run on a fresh server with an empty generation cache; times relative to the click (s)."""
    from playwright import sync_api

    me = os.getpid()
    with FreshServer(workdir, args_extra) as server, sync_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(workdir / "user-data"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1440, "height": 960})
        try:
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            page.set_default_timeout(900_000)
            page.add_init_script(PROBE_JS.replace("__MODE__", mode))
            page.goto(server.url)
            page.locator(TAG).wait_for(timeout=120_000)
            row = page.locator("data-table-module tbody tr", has_text=ROW_TEXT).first
            row.wait_for()
            time.sleep(1.0)  # let the page's start-up requests settle
            idle0 = cpu_snapshot(me, server.proc.pid)
            time.sleep(2.0)
            idle = diff(idle0, cpu_snapshot(me, server.proc.pid))  # the page doing nothing, 2 s
            page.evaluate("() => { window.__probe.t0 = performance.now(); window.__probe.requests = []; }")
            marks = Marks(server, me)
            threads0 = thread_cpu(server.proc.pid)
            cpu0 = cpu_snapshot(me, server.proc.pid)
            click_wall = time.time()
            marks.start()
            row.click()
            if mode == "noprobe":
                marks.span_done.wait(900)
                page.locator(f"{TAG}[data-state=ready]").wait_for(state="attached")
                cpu1 = cpu_snapshot(me, server.proc.pid)
            else:
                page.evaluate("() => window.__probe.done")
                cpu1 = cpu_snapshot(me, server.proc.pid)
                marks.span_done.wait(30)
            marks.stop.set()
            time.sleep(0.5)
            probe = page.evaluate("() => { const {done, ...rest} = window.__probe; return rest; }")
            response = page.locator(f"{TAG} .response").inner_text()
        finally:
            ctx.close()
        log = server.log_path.read_text()
    m = _server_marks(log, click_wall)
    t0 = probe["t0"]
    rel = lambda v: None if v is None else round((v - t0) / 1000, 3)  # noqa: E731
    requests = [{"model": r["model"], "detail": r["detail"], "sent_s": rel(r["sent"]), "done_s": rel(r["done"])}
                for r in probe["requests"] if r["sent"] >= t0]
    quick = next((r for r in requests if r["detail"] == "span"), None)
    gen = marks.snap.get("gen", cpu1)
    streams = [r for r in requests if r["detail"] == "stream"]
    return {"variant": f"browser{'' if mode == 'stream' else '_' + mode}",
            "request_sent_s": quick and quick["sent_s"], "generation_done_s": m.get("generation_done_s"),
            "generation_s": m.get("generation_s"), "generated_tokens": m.get("generated_tokens"),
            "span_done_s": m.get("span_done_s"), "answer_received_s": quick and quick["done_s"],
            "first_token_s": rel(probe["streamed"]), "first_highlight_s": rel(probe["paintedFrame"]),
            "stream_polls": len(streams),
            "stream_polls_during_generation": sum(1 for r in streams if m.get("generation_done_s") is None
                                                  or r["sent_s"] <= m["generation_done_s"]),
            "cpu_idle_2s": idle, "cpu_generation": diff(cpu0, gen), "cpu_to_end": diff(cpu0, cpu1),
            "server_busy_threads_generation": top_threads(threads0, marks.threads.get("gen", {})),
            "streamed_text": probe["streamedText"], "response": response.strip(), "requests": requests,
            "bodies": probe["bodies"]}


def http_run(args_extra: list[str], workdir: Path, bodies: dict, polls: bool) -> dict:
    """The first-highlight request the page sent, from this script (no browser); optionally with stream polls."""
    me = os.getpid()
    quick, stream = bodies["span"], bodies.get("stream")
    if polls and stream is None:
        raise SystemExit("http_polls needs a stream request from a browser run; the page sent none.")
    path = lambda url: "/" + url.split("/", 3)[-1] if url.startswith("http") else url.lstrip(".")  # noqa: E731
    with FreshServer(workdir, args_extra) as server:
        marks = Marks(server, me)
        threads0 = thread_cpu(server.proc.pid)
        cpu0 = cpu_snapshot(me, server.proc.pid)
        click_wall = time.time()
        marks.start()
        answer: dict = {}

        def send() -> None:
            answer["status"], _, _ = server.request("POST", path(quick["url"]), quick["body"],
                                                    {"Content-Type": "application/json"}, timeout=900)
            answer["done"] = time.time() - click_wall

        sender = threading.Thread(target=send)
        sender.start()
        n = 0
        while polls and sender.is_alive():
            time.sleep(STREAM_POLL_S)
            body = json.loads(stream["body"])
            n += 1
            for ex in body["inputs"]:
                ex["id"] = ex["data"]["_id"] = f"{ex['id']}-script{n}"
            server.request("POST", path(stream["url"]), json.dumps(body), {"Content-Type": "application/json"})
        sender.join()
        cpu1 = cpu_snapshot(me, server.proc.pid)
        marks.stop.set()
        log = server.log_path.read_text()
    assert answer.get("status") == 200, answer
    m = _server_marks(log, click_wall)
    return {"variant": "http_polls" if polls else "http", "generation_done_s": m.get("generation_done_s"),
            "generation_s": m.get("generation_s"), "generated_tokens": m.get("generated_tokens"),
            "span_done_s": m.get("span_done_s"), "answer_received_s": round(answer["done"], 3), "stream_polls": n,
            "cpu_generation": diff(cpu0, marks.snap.get("gen", cpu1)), "cpu_to_end": diff(cpu0, cpu1),
            "server_busy_threads_generation": top_threads(threads0, marks.threads.get("gen", {}))}


def lit_run(prompt: str, max_new_tokens: int) -> dict:
    """LIT's own generation (HFGenerativeModel) + whole-response span (HFSalienceModel), seconds, in a subprocess
    (its own process, like the server: it must not share threads with this one)."""
    code = f"""
import json, os, time, torch, sequence_salience as ss
from lit_nlp.examples.prompt_debugging import transformers_lms as t
def threads():
    hz = os.sysconf("SC_CLK_TCK"); out = {{}}
    for tid in os.listdir("/proc/self/task"):
        f = open(f"/proc/self/task/{{tid}}/stat").read(); f = f[f.rindex(")") + 2:].split()
        out[tid] = (int(f[11]) + int(f[12])) / hz
    return out
lm = ss.load_model("default")
folder = lm.model.config._name_or_path
del lm
gen = t.HFGenerativeModel(model_name_or_path=folder)
sal = t.HFSalienceModel(model_name_or_path=folder)
tok = sal.tokenizer
prompt = {json.dumps(prompt)}
chat = tok.apply_chat_template([{{"role": "user", "content": prompt}}], tokenize=False, add_generation_prompt=True)
gen.max_length = len(tok(chat)["input_ids"]) + {max_new_tokens}  # LIT counts prompt + new tokens
th0 = threads()
c0 = time.process_time()
t0 = time.perf_counter()
# LIT 1.3.1's predict() fails on a batch of one after generating (ntok_in is built as [batch, ntok_in]: "Batch
# length of predictions should be same"), so its generation step is timed directly.
out = gen._get_batched_outputs([{{"prompt": chat}}])
t1 = time.perf_counter()
target = out["response"][0]
c1 = time.process_time()
th1 = threads()
n_prompt = len(tok(chat)["input_ids"]); n_total = len(tok(chat + target)["input_ids"])
list(sal.predict([{{"prompt": chat, "target": target, "target_mask": [0] * n_prompt + [1] * (n_total - n_prompt)}}]))
t2 = time.perf_counter()
c2 = time.process_time()
busy = sorted((round(th1[k] - th0.get(k, 0), 2) for k in th1 if th1[k] - th0.get(k, 0) >= 0.05), reverse=True)[:4]
print(json.dumps({{"generation_s": round(t1 - t0, 3), "span_s": round(t2 - t1, 3), "response": target,
                  "generation_cpu_s": round(c1 - c0, 2), "span_cpu_s": round(c2 - c1, 2),
                  "response_tokens": n_total - n_prompt, "torch_threads": torch.get_num_threads(),
                  "busy_threads_generation": busy}}))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.returncode != 0:
        raise SystemExit(f"LIT's models failed:\n{out.stderr[-3000:]}")
    return {"variant": "lit", **json.loads(out.stdout.strip().splitlines()[-1])}


def server_torch_threads() -> int:
    """torch's intra-op threads in a process that imports what the server imports (nothing sets them at run time)."""
    out = subprocess.run([sys.executable, "-c", "import lit_app.server, torch; print(torch.get_num_threads())"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return int(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else -1


def build_bundle() -> None:
    """The module's bundle from the current frontend/src (the server serves frontend/dist)."""
    out = subprocess.run(["npm", "run", "build"], cwd=ROOT / "frontend", capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"`npm run build` failed in frontend/:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")


# ------------------------------------------------------------------------------------------------ main


def describe(r: dict) -> str:
    cpu = r["cpu_generation"]
    gen_cpu = f"during generation: server {cpu.get('server', 0)} s"
    if r["variant"].startswith("browser"):
        gen_cpu += f", browser {browser_cpu(cpu)} s {({k: v for k, v in cpu.items() if k != 'server'})}"
        gen_cpu += f" ({r['stream_polls_during_generation']} stream polls)"
    first = (f" -> first token shown {r['first_token_s']} s" if r["variant"].startswith("browser") else "")
    end = (f" -> first highlight {r['first_highlight_s']} s" if r.get("first_highlight_s") is not None
           else f" -> answer received {r['answer_received_s']} s")
    return (f"{r['variant']:16s}: generation {r['generation_s']} s ({r['generated_tokens']} tokens, done at"
            f" {r['generation_done_s']} s){first} -> span done {r['span_done_s']} s{end};"
            f" stream polls {r.get('stream_polls', 0)}; CPU {gen_cpu}; to the end: server"
            f" {r['cpu_to_end'].get('server', 0)} s, browser {browser_cpu(r['cpu_to_end'])} s;"
            f" busiest server threads in generation {r['server_busy_threads_generation']}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--variants", default="browser,lit",
                   help=f"comma-separated, in the order run within each run, from {', '.join(VARIANTS)}")
    p.add_argument("--no_lit", action="store_true", help="leave out the lit variant")
    p.add_argument("--no_build", action="store_true", help="serve frontend/dist as it is (not rebuilt first)")
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--verbose", action="store_true", help="print each browser run's requests")
    args = p.parse_args()
    variants = [v for v in args.variants.split(",") if v and not (args.no_lit and v == "lit")]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"--variants: unknown {sorted(unknown)}; use some of {', '.join(VARIANTS)}.")
    if {"http", "http_polls"} & set(variants) and not any(v.startswith("browser") for v in variants):
        raise SystemExit("--variants: http and http_polls replay a browser run's requests; add a browser variant.")
    if not args.no_build:
        build_bundle()
    from lit_app.data import datasets

    row = next(r for r in datasets.load_jsonl(datasets.CASE_STUDIES_PATH) if r["prompt"].startswith(ROW_TEXT))
    print(f"load average before: {os.getloadavg()}; torch threads: server {server_torch_threads()}", flush=True)
    results: dict[str, list[dict]] = {v: [] for v in variants}
    bodies: dict = {}
    extra = ["--max_new_tokens", str(args.max_new_tokens)]
    for k in range(args.runs):
        print(f"run {k + 1} (load average {os.getloadavg()[0]:.2f})", flush=True)
        for v in sorted(variants, key=lambda v: not v.startswith("browser")):  # a browser run first: http replays it
            with tempfile.TemporaryDirectory(prefix="bench-browser-") as tmp:
                if v == "lit":
                    r = lit_run(row["prompt"], args.max_new_tokens)
                    print(f"  {'lit':16s}: generation {r['generation_s']} s ({r['response_tokens']} tokens) + span"
                          f" {r['span_s']} s; CPU {r['generation_cpu_s']} + {r['span_cpu_s']} s; torch threads"
                          f" {r['torch_threads']}; busiest threads in generation {r['busy_threads_generation']}",
                          flush=True)
                elif v.startswith("browser"):
                    r = browser_run(extra, Path(tmp), {"browser": "stream"}.get(v, v.removeprefix("browser_")))
                    bodies = bodies or r.pop("bodies")
                    r.pop("bodies", None)
                    print("  " + describe(r), flush=True)
                    if v == "browser" and r["first_token_s"] is None and (r["generation_s"] or 0) > 1.0:
                        print("  WARNING: no streamed token was shown although generation took"
                              f" {r['generation_s']} s: is the served bundle current?", flush=True)
                    if args.verbose:
                        print(json.dumps(r["requests"], indent=1))
                else:
                    r = http_run(extra, Path(tmp), bodies, polls=v == "http_polls")
                    print("  " + describe(r), flush=True)
            results[v].append(r)
    med = lambda xs: round(statistics.median(xs), 3) if xs else None  # noqa: E731
    summary: dict = {"runs": args.runs}
    lit = results.get("lit", [])
    for v, rs in results.items():
        if v == "lit" or not rs:
            continue
        s = {"generation_s": med([r["generation_s"] for r in rs]),
             "server_cpu_generation_s": med([r["cpu_generation"].get("server", 0) for r in rs]),
             "server_cpu_to_end_s": med([r["cpu_to_end"].get("server", 0) for r in rs])}
        if v.startswith("browser"):
            s["browser_cpu_generation_s"] = med([browser_cpu(r["cpu_generation"]) for r in rs])
            s["first_token_s"] = med([r["first_token_s"] for r in rs if r["first_token_s"] is not None])
            s["first_highlight_s"] = med([r["first_highlight_s"] for r in rs if r["first_highlight_s"] is not None])
        if lit:
            s["generation_ratio_vs_lit"] = med([r["generation_s"] / x["generation_s"] for r, x in zip(rs, lit)])
            end = [(r.get("first_highlight_s") or r.get("answer_received_s")) for r in rs]
            if all(e is not None for e in end) and v != "browser_noprobe":
                s["first_highlight_ratio_vs_lit"] = med(
                    [e / (x["generation_s"] + x["span_s"]) for e, x in zip(end, lit)])
            s["cpu_ratio_vs_lit"] = med([r["cpu_to_end"].get("server", 0) / (x["generation_cpu_s"] + x["span_cpu_s"])
                                         for r, x in zip(rs, lit)])
            if v == "browser":
                s["same_response_as_lit"] = all(r["response"] == x["response"].strip() for r, x in zip(rs, lit))
        summary[v] = s
    if lit:
        summary["lit"] = {"generation_s": med([x["generation_s"] for x in lit]), "span_s": med([x["span_s"] for x in lit]),
                          "total_s": med([x["generation_s"] + x["span_s"] for x in lit]),
                          "cpu_s": med([x["generation_cpu_s"] + x["span_cpu_s"] for x in lit])}
    print(f"load average after: {os.getloadavg()}")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
