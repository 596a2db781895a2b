"""Time to the first (coarse) and the full faithfulness-curves result in a real browser (issue 35 point 5:
"the explanation tests show a first, coarse result within 30 s and refine it").

    python benchmarks/bench_explain_first_result.py [--rows simple,cot] [--runs 1] [--no_build]

What a user does, as tests/e2e/test_coarse_curves.py does it: the real server (`python -m lit_app.server`,
default model, tests/server_process.py) and Debian Chromium (Playwright, headless) at 1280x720; open LIT,
click the row, wait for the first highlight (the salience module's `data-state=ready`), open the *Test this
explanation* tab, wait until it names the whole response as its target, click *Run* of the curves with the
module's defaults (word segments, 10 points, grad_norm + grad_x_input, filler). From the click, in page time:

* first result: the module shows the coarse curves (`.curves.preliminary`);
* full result: the upper bound's curve is drawn (the coarse pass has none).

A recorder samples the module every 50 ms (the test's, tests/e2e/plugin_checks.py); a fetch wrapper reads
the explain model's answers (the job's stages as the status polls saw them, the number of segments and of
scored prompts). The rows are
the simple question ("What is the capital of France?", the test's row, the baseline for the ratio) and the
shipped chain-of-thought case ("A train leaves at 2:15 pm", its 143-token response), in that order on the
same server, a fresh page for each. For the chain-of-thought row the per-token gradient job that the first
highlight starts may still be running when Run is clicked (as for a user who clicks at once); the stages
column shows when the test waited for it, and the matrices column the job's state (done/total targets) as
the page's last poll before the click and before the first result saw it (and how many polls after the
click said it waited for the test: lit_app/model/scheduler.py's user jobs go first). `uptime`'s load is printed at the start and end of each run.
Prints a Markdown table; asserts nothing.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e import plugin_checks  # noqa: E402
from tests.server_process import ServerProcess  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SALIENCE, TAG = "prompt-salience-module", "explain-test-module"
SIZE = {"width": 1280, "height": 720}
ROWS = {"simple": "What is the capital of France?", "cot": "A train leaves at 2:15 pm"}
TIMEOUT_MS = 1_800_000

# Before any page script: the explain model's answers (status polls and the final answer), with page times.
FETCH_JS = r"""
(() => {
  window.__explain = [];
  window.__detail = [];
  const nativeFetch = window.fetch.bind(window);
  window.fetch = async function (input, init) {
    const url = typeof input === 'string' ? input : input.url;
    const res = await nativeFetch(input, init);
    const model = url.includes('/get_preds') ? new URL(url, location.href).searchParams.get('model') || '' : '';
    if (/explain/.test(model)) {
      res.clone().json().then((body) => {
        const e = body && body[0] && body[0].explain;
        if (e) window.__explain.push({t: performance.now(), e});
      }).catch(() => {});
    } else if (/_salience$/.test(model)) {  // the per-token matrices job's progress, as the page polls it
      res.clone().json().then((body) => {
        const d = body && body[0] && body[0].salience && body[0].salience.detail;
        if (d && d.kind === 'grad') window.__detail.push({t: performance.now(), d});
      }).catch(() => {});
    }
    return res;
  };
})();
"""


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_row(page, url: str, row_text: str, full_timeout_s: float) -> dict:
    from playwright.sync_api import expect

    page.goto(url)
    page.locator(SALIENCE).wait_for(timeout=120_000)
    t_click_row = time.perf_counter()
    page.locator("data-table-module tbody tr", has_text=row_text).first.click()
    page.locator(f"{SALIENCE}[data-state=ready]").wait_for(state="attached", timeout=TIMEOUT_MS)
    highlight_s = time.perf_counter() - t_click_row
    page.locator(".tab", has_text="Test this explanation").first.click()
    mod = page.locator(TAG)
    expect(mod.locator(".for")).to_contain_text("target: whole response (", timeout=120_000)
    target = mod.locator(".for").inner_text().strip()
    load0 = load()
    page.evaluate(plugin_checks.CURVES_RECORDER_JS, TAG)
    page.evaluate("() => { window.__explain = []; }")
    mod.locator("button.run.curves").click()
    try:
        mod.locator(".curves svg.chart.deletion path.line.upper-bound").wait_for(timeout=full_timeout_s * 1000)
    except Exception as e:  # playwright's TimeoutError: the table says "none"
        print(f"(no full result within {full_timeout_s:.0f} s: {type(e).__name__})", flush=True)
    seen = page.evaluate(plugin_checks.CURVES_READ_JS)
    answers = page.evaluate("() => window.__explain.map(a => ({...a, t: (a.t - window.__t0) / 1000}))")
    details = page.evaluate("() => window.__detail.map(a => ({...a, t: (a.t - window.__t0) / 1000}))")
    coarse = next((e["t"] for e in seen if e["preliminary"]), None)
    full = next((e["t"] for e in seen if not e["preliminary"] and e["upper"]), None)

    def matrices_at(t: float | None) -> str:
        """The per-token matrices job as the page's last poll before `t` saw it."""
        last = [a["d"] for a in details if t is not None and a["t"] <= t]
        if not last:
            return "not polled"
        d = last[-1]
        return f"{d['state']} {d['done']}/{d['total']}" + (" waiting" if d.get("waiting") else "")

    paused = sum(1 for a in details if a["t"] >= 0 and a["d"].get("waiting"))
    stages: list[str] = []
    n_segments = n_scored = None
    for a in answers:
        job = a["e"].get("job")
        if job:
            label = f"{job['stage']}@{a['t']:.0f}s"
            if not stages or stages[-1].split("@")[0] != job["stage"]:
                stages.append(label)
            if job.get("partial"):
                n_segments = job["partial"].get("n_segments")
        if "n_scored" in a["e"] and not a["e"].get("preliminary"):
            n_segments, n_scored = a["e"].get("n_segments"), a["e"]["n_scored"]
    return {"highlight_s": highlight_s, "target": target, "coarse": coarse, "full": full, "stages": stages,
            "matrices": f"{matrices_at(0.0)} → {matrices_at(coarse)} ({paused} polls said waiting)",
            "n_segments": n_segments, "n_scored": n_scored, "load": f"{load0} / {load()}"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="simple,cot", help=f"comma-separated, of {sorted(ROWS)}")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--full_timeout", type=float, default=1200, help="stop waiting for the full result after this (s)")
    p.add_argument("--no_build", action="store_true", help="serve frontend/dist as it is (else `npm run build`)")
    args = p.parse_args()
    if not args.no_build:  # a stale bundle would measure old code
        subprocess.run(["npm", "run", "build"], cwd=ROOT / "frontend", check=True, capture_output=True)
    from playwright import sync_api

    print(f"uptime at start: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}\n")
    print("| run | row | first highlight | Run's target | segments | prompts scored (full) | first (coarse) result "
          "| full result | job stages seen (s after the click) | matrices job at the click → at the first result "
          "| load at click / at full |")
    print("|---|---|---:|---|---:|---:|---:|---:|---|---|---|")
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(["--host", "127.0.0.1"], Path(tmp)) as server, \
            sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            for run in range(args.runs):
                for name in args.rows.split(","):
                    ctx = browser.new_context(viewport=SIZE)
                    ctx.add_init_script(FETCH_JS)
                    page = ctx.new_page()
                    page.set_default_timeout(TIMEOUT_MS)
                    try:
                        r = run_row(page, server.url, ROWS[name], args.full_timeout)
                    finally:
                        ctx.close()
                    results.setdefault(name, []).append(r)
                    fmt = lambda v: "none" if v is None else f"{v:.1f} s"  # noqa: E731
                    print(f"| {run + 1} | {name} | {r['highlight_s']:.1f} s | {r['target']} | {r['n_segments']} | "
                          f"{r['n_scored']} | **{fmt(r['coarse'])}** | {fmt(r['full'])} | {' → '.join(r['stages'])} "
                          f"| {r['matrices']} | {r['load']} |", flush=True)
        finally:
            browser.close()
    if "simple" in results and "cot" in results:
        for key in ("coarse", "full"):
            a, b = results["simple"][-1][key], results["cot"][-1][key]
            if a and b:
                print(f"\nchain of thought / simple question, {key}: {b / a:.2f}x ({b:.1f} s / {a:.1f} s)")
    print(f"\nuptime at end: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
