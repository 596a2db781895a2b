"""Per-token matrices of the shipped chain-of-thought row: in-process vs. through the real server as the
browser asks for them (issue 35, point 5).

    python benchmarks/bench_matrix_browser_path.py [--load 0 2] [--via http browser] [--poll_ms 700]
                                                   [--max_new_tokens 256]

For each `--load` value (busy processes this script starts itself, each a pure-Python busy loop, stopped
afterwards; 0 = the machine as it is) and each `--via`:

* http: `python -m lit_app.server` (tests/server_process.py), the chain-of-thought row selected as the
  page does: the first highlight (`detail="span"`, generates the response and starts the "grad" job),
  then `detail="poll"` every `--poll_ms` (the page's POLL_MS) until the matrices come. Prints the time
  from the first highlight's answer to the matrices, and the job's own time from the server's log;
* browser: the same server, the page itself in headless Chromium at 1280x720 (as
  bench_first_highlight_browser.py drives it): the row is clicked, the page streams the response, asks for
  the first highlight and polls the matrices as it does (controller.ts POLL_MS). A fetch wrapper installed
  before LIT's code records, in page time, when the first highlight's answer and the poll answer carrying
  the matrices arrived; the page's own rendering and polling cost is included;
* in-process: `ss.compute_salience(lm, chat, response)` on the same response (the default methods,
  unsliced), the model loaded in this process while no server runs, under the same busy processes.

The row carries its own response budget (lit_app/data/case_studies.jsonl, 192 tokens: the model states its
answer at about token 130); `--max_new_tokens 64` starts the server with that cap, which reproduces the
64-token response of before issue 35's budget. Prints both times, their ratio (goal: <= 2, issue 35) and
`uptime`'s load before each. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import sequence_salience as ss  # noqa: E402
from lit_app.data import datasets  # noqa: E402
from lit_app.schema import fields
from tests.server_process import ServerProcess  # noqa: E402

CASE = "chain-of-thought arithmetic"
SAL = fields.model_group_names("smollm2")[1]


def _busy() -> None:
    while True:
        pass


def _row() -> dict:
    row = next(r for r in datasets.shipped_rows() if r["case"] == CASE and not r.get("target"))
    out = {"prompt": row["prompt"], "system": row.get("system") or "", "target": ""}
    if fields.MAX_NEW_TOKENS in row:  # the row's own budget (the server caps it by its --max_new_tokens)
        out[fields.MAX_NEW_TOKENS] = row[fields.MAX_NEW_TOKENS]
    return out


def _post(server: ServerProcess, data: dict, n: int) -> dict:
    body = json.dumps({"inputs": [{"id": f"b{n}", "data": data}]}).encode()
    req = urllib.request.Request(f"{server.base_url.rstrip('/')}/get_preds?model={SAL}", data=body,
                                 headers={**server.headers, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())[0]


def _job_seconds(server: ServerProcess) -> float | None:
    m = re.findall(r"grad job done in ([0-9.]+) s", server.log_path.read_text())
    return float(m[-1]) if m else None


def through_server(poll_s: float, workdir: str, server_args: list[str]) -> tuple[str, float, float, float | None, int]:
    """(response, first highlight s, matrices s after it, the job's own s from the log, polls)."""
    data = _row()
    with ServerProcess(server_args, workdir, timeout_s=1800) as server:
        t = time.perf_counter()
        out = _post(server, {**data, "detail": "span"}, 0)
        first = time.perf_counter() - t
        response = out[fields.RESPONSE]
        t, polls = time.perf_counter(), 0
        while True:
            time.sleep(poll_s)
            polls += 1
            out = _post(server, {**data, "detail": "poll"}, polls)
            state = out[fields.SALIENCE]["detail"]["state"]
            if state not in ("queued", "running"):
                break
        matrices = time.perf_counter() - t
        if state != "done":
            raise RuntimeError(f"the grad job ended {state}: {out[fields.SALIENCE]['detail']}\n{server.log_tail()}")
        job_s = _job_seconds(server)
    return response, first, matrices, job_s, polls


# Installed before LIT's code: records each /get_preds request of the salience model (its detail, sent and
# answered, page time) and, from the answers, the first highlight's response and when a poll brought the
# matrices (an answer whose payload has the prompt's "text": the complete one). No polling of the DOM.
PROBE_JS = r"""
(() => {
  const m = window.__m = {t0: null, requests: [], firstAt: null, response: null, matricesAt: null, polls: 0};
  const nativeFetch = window.fetch.bind(window);
  window.fetch = async function (input, init) {
    const url = typeof input === 'string' ? input : input.url;
    if (!url.includes('/get_preds') || !url.includes('_salience')) return nativeFetch(input, init);
    let detail = '';
    try { detail = ((JSON.parse((init && init.body) || '{}').inputs || [])[0] || {}).data.detail || ''; } catch (e) {}
    const rec = {detail, sent: performance.now(), done: null};
    if (m.t0 !== null) m.requests.push(rec);
    const res = await nativeFetch(input, init);
    rec.done = performance.now();
    if (m.t0 === null || !res.ok) return res;
    try {
      const out = (await res.clone().json())[0] || {};
      const sal = out.salience || {};
      if (detail === 'span' && m.firstAt === null) {
        m.firstAt = rec.done; m.response = out.response;
      }
      if (detail === 'poll') {
        m.polls++;
        if (m.matricesAt === null && typeof sal.text === 'string') m.matricesAt = rec.done;
      }
    } catch (e) {}
    return res;
  };
})();
"""
ROW_TEXT = "A train leaves at 2:15 pm"
TAG = "prompt-salience-module"


def through_browser(workdir: str, server_args: list[str]) -> tuple[str, float, float, float | None, int]:
    """(response, first highlight s after the click, matrices s after the first highlight (page time),
    the job's own s from the log, the page's polls)."""
    from playwright import sync_api

    from benchmarks.bench_first_highlight_browser import CHROMIUM, CHROMIUM_ARGS

    with ServerProcess(["--host", "127.0.0.1", *server_args], workdir, own_client_root=False, timeout_s=1800) as server, \
            sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.set_default_timeout(3_600_000)
            page.add_init_script(PROBE_JS)
            page.goto(server.url)
            page.locator(TAG).wait_for(timeout=300_000)
            row = page.locator("data-table-module tbody tr", has_text=ROW_TEXT).first
            row.wait_for()
            time.sleep(1.0)  # the page's start-up requests
            page.evaluate("() => { window.__m.t0 = performance.now(); }")
            row.click()
            # Waits on the page's own clock, one check a second (no per-frame polling from here).
            page.wait_for_function("() => window.__m.matricesAt !== null", polling=1000, timeout=3_600_000)
            m = page.evaluate("() => window.__m")
        finally:
            browser.close()
        job_s = _job_seconds(server)
    first = (m["firstAt"] - m["t0"]) / 1000
    matrices = (m["matricesAt"] - m["firstAt"]) / 1000
    return m["response"], first, matrices, job_s, m["polls"]


def in_process(response: str) -> tuple[float, int]:
    lm = ss.load_model("default")
    data = _row()
    chat = lm.format_prompt(data["prompt"], system=data["system"] or None)
    ss.compute_salience(lm, "Hi", " there")  # warm-up
    t = time.perf_counter()
    result = ss.compute_salience(lm, chat, response)
    seconds = time.perf_counter() - t
    print(f"  in-process: {result.num_targets} targets x {len(result.tokens)} tokens", flush=True)
    return seconds, result.num_targets


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--load", type=int, nargs="+", default=[0, 2], help="busy processes started during each run")
    p.add_argument("--poll_ms", type=int, default=700, help="the page's poll interval (controller.ts POLL_MS)")
    p.add_argument("--via", nargs="+", choices=("http", "browser"), default=["http"],
                   help="how the matrices are asked for: this script's HTTP polls, or the page in Chromium")
    p.add_argument("--max_new_tokens", type=int, default=None,
                   help="the server's cap (default: its own, 256); 64 reproduces the response before issue 35")
    args = p.parse_args()
    server_args = [] if args.max_new_tokens is None else ["--max_new_tokens", str(args.max_new_tokens)]
    rows = []
    for load in args.load:
        procs = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(load)]
        for q in procs:
            q.start()
        try:
            time.sleep(2 if load else 0)
            for via in args.via:
                avg = ", ".join(f"{x:.2f}" for x in os.getloadavg())
                print(f"--- {load} busy processes, via {via}; load before: {avg}", flush=True)
                with tempfile.TemporaryDirectory() as tmp:
                    if via == "browser":
                        response, first, matrices, job_s, polls = through_browser(tmp, server_args)
                    else:
                        response, first, matrices, job_s, polls = through_server(args.poll_ms / 1000, tmp,
                                                                                  server_args)
                print(f"  server: first highlight {first:.1f} s, matrices {matrices:.1f} s after it "
                      f"(job {job_s} s, {polls} polls)", flush=True)
                inproc, n_targets = in_process(response)
                avg_after = ", ".join(f"{x:.2f}" for x in os.getloadavg())
                print(f"  in-process: {inproc:.1f} s; ratio {via}/in-process {matrices / inproc:.2f};"
                      f" load after: {avg_after}", flush=True)
                rows.append((load, via, avg, n_targets, first, matrices, job_s, inproc))
        finally:
            for q in procs:
                q.kill()
    print("\n| busy processes | via | load before | targets | first highlight s | matrices after it s | job s (log) "
          "| in-process s | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for load, via, avg, n_targets, first, matrices, job_s, inproc in rows:
        print(f"| {load} | {via} | {avg} | {n_targets} | {first:.1f} | {matrices:.1f} | {job_s} | {inproc:.1f} "
              f"| {matrices / inproc:.2f} |")


if __name__ == "__main__":
    main()
