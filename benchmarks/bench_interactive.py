"""Interactive requests while the background matrix job runs vs. idle, against the real server (issue 16).

    python benchmarks/bench_interactive.py [--n 10] [--tokens 4000 [--long_n 3]] [--slice_s 0.25]

Starts `python -m lit_app.server` (tests/server_process.py's ServerProcess), selects the shipped
chain-of-thought example (the first-highlight request, `detail="span"`, generates the answer and
starts the per-token gradient job), then, while that job runs, sends clicked spans
(`detail="span"` + `target_span`), inside-the-model traces and tokenizations, one at a time,
`--n` of each; a sample counts as "busy" only when the job was running before and after it.
Each is paired with the same request idle: no job queued or running (a clicked span on a datapoint without
matrices, so that it computes like the busy one; the job it starts is stopped before the next
sample by selecting a one-token datapoint). Busy and idle samples alternate, so that a load that
drifts during the run touches both alike (the job restarts after each idle sample). Prints p50/p95
of each and the busy/idle ratios.

`--tokens 4000`: the same for clicked spans on a prompt of about that many tokens (a 16-token
typed target), `--long_n` samples each. Prints figures measured in this run; asserts nothing.
Goals (issue 16): busy/idle <= 1.5 for spans and traces, also at 4,000 tokens.

`--two_clients`: the background job belongs to one page (client id "bench-owner") and the requests come from
another ("bench-clicker"), as when two tabs or two people share a server (issue 43: a click of one is never
behind another's long job); idle samples stop both clients' jobs. `--burn N`: N busy processes
(benchmarks/timing.py `burners`) load the CPU for the whole run, started after the server is up.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.timing import burners  # noqa: E402
from lit_app.schema import fields  # noqa: E402
from lit_app.wrappers import inside as lit_inside  # noqa: E402
from tests.server_process import ServerProcess, client_header  # noqa: E402

CASE = "chain-of-thought arithmetic"  # the "train leaves at 2:15 pm" row
NAME = "smollm2"
GEN, SAL, TOK = fields.model_group_names(NAME)
TRACE = lit_inside.model_names(NAME)[0]
RESET = {"prompt": "Hi", "target": " x", "chat": False}  # a one-token datapoint: selecting it stops other jobs
# The salience page's poll interval (frontend/src/salience/page.ts POLL_MS): the job's page polls it this often.
POLL_S = 0.7


class Client:
    def __init__(self, server: ServerProcess, client_id: str = ""):
        """client_id: the page's id (lit_app/edge/clients.py); "" sends none (a script)."""
        url = server.base_url  # without ?token=; the token goes in the headers
        self.url = url if url.endswith("/") else url + "/"
        self.headers = {**server.headers, **client_header(client_id), "Content-Type": "application/json"}
        self.count = 0

    def post(self, model: str, data: dict, timeout: float = 1800) -> tuple[float, dict]:
        self.count += 1
        body = json.dumps({"inputs": [{"id": f"b{self.count}", "data": data}]}).encode()
        start = time.perf_counter()
        req = urllib.request.Request(f"{self.url}get_preds?model={model}", data=body, headers=self.headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                out = json.loads(r.read())[0]
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{model} {data}: HTTP {e.code}: {e.read()[:300]!r}") from None
        return time.perf_counter() - start, out

    def n_targets(self, data: dict) -> int:
        """Target tokens of a datapoint (a typed target is tokenized anew), from the tokenizer model."""
        both = len(self.post(TOK, data)[1][fields.TOKENS])
        prompt = len(self.post(TOK, {k: v for k, v in data.items() if k != "target"})[1][fields.TOKENS])
        return both - prompt

    def job(self, data: dict) -> dict:
        return self.post(SAL, {**data, "detail": "poll"})[1][fields.SALIENCE]["detail"]


def _wait(client: Client, data: dict, states: tuple[str, ...], min_done: int = 0) -> dict:
    while True:
        status = client.job(data)
        if status["state"] in states and (status["state"] != "running" or status["done"] >= min_done):
            return status
        if status["state"] in ("done", "cancelled", "error", "none") and status["state"] not in states:
            return status
        time.sleep(0.1)


def _stats(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]
    return statistics.median(xs), p95


class Busy:
    """Keeps a gradient job running: a new typed-target variant of the datapoint when the last one finished.

    Its page polls it every POLL_S meanwhile, as the browser does (a thread): the server stops a job nobody polls
    for its heartbeat (30 s), and one click on a 2,000-token prompt takes longer than that on a loaded machine, so
    without the polls every busy sample found the job cancelled and was taken again, for ever (session 30's
    `--two_clients --tokens 2000` run printed nothing in 34 minutes).
    """

    def __init__(self, client: Client, base: dict, target: str):
        self.client, self.base, self.target, self.k = client, base, target, 0
        self.data = None
        self._stop = threading.Event()
        threading.Thread(target=self._poll, name="bench-page-poll", daemon=True).start()

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            if self.data is not None:
                try:
                    self.client.job(self.data)
                except (OSError, RuntimeError):  # the server is busy or stopping: the next poll tries again
                    pass

    def release(self) -> dict | None:
        """Its page stops polling the job (before an idle sample stops it); returns the job's datapoint."""
        data, self.data = self.data, None
        return data

    def close(self) -> None:
        self._stop.set()

    def ensure(self) -> dict:
        if self.data is not None:
            status = self.client.job(self.data)
            if status["state"] == "running" and status["done"] < status["total"] - 2:
                return self.data
        self.k += 1
        self.data = {**self.base, "target": self.target + " " * self.k}
        self.client.post(SAL, {**self.data, "detail": "span"})  # first highlight: starts the job
        _wait(self.client, self.data, ("running",), min_done=1)
        return self.data

    def running(self) -> bool:
        status = self.client.job(self.data)
        return status["state"] == "running"


def _idle(pages: list[Client], data: dict | None) -> None:
    """Stops every job: each page selects the one-token datapoint (a job ends once no page wants it), then waits
    until its own is done and the job of `data` has ended. Every page selects before any polls: a page's poll of
    a job that another page still wants makes it one of the job's owners again (lit_app/model/jobs_table.py `get`),
    and the job then ran to its end (with --two_clients, minutes per idle sample at 2,000 tokens)."""
    for page in pages:
        page.post(SAL, {**RESET, "detail": "span"})
    for page in pages:
        _wait(page, RESET, ("done",))
    if data is not None:
        _wait(pages[0], data, ("cancelled", "done", "none", "error"))


def measure(client: Client, base: dict, target: str, kinds: tuple[str, ...], n: int,
            rng: random.Random, owner: Client | None = None) -> dict[str, dict[str, list[float]]]:
    """{kind: {"busy": [s], "idle": [s]}} for kind in span / trace / tokens, sent by `client`; the background job
    is `owner`'s (another page's) when given, else `client`'s."""
    out = {k: {"busy": [], "idle": []} for k in kinds}
    busy = Busy(owner or client, base, target)
    pages = [client] if owner is None else [owner, client]

    def request(kind: str, data: dict) -> float:
        n_targets = client.n_targets(data)
        if kind == "span":
            t0 = rng.randrange(0, n_targets - 1)
            t1 = min(n_targets, t0 + rng.randint(1, 6))
            return client.post(SAL, {**data, "detail": "span", "target_span": f"{t0}:{t1}"})[0]
        if kind == "trace":
            return client.post(TRACE, {**data, "inside_t": rng.randrange(0, n_targets)})[0]
        return client.post(TOK, data)[0]

    # Busy and idle samples alternate (busy, idle, busy, ...), so that a load that drifts during the
    # run (other processes on a shared machine) touches both alike; an idle sample first stops the job.
    idle_k = 0
    try:
        for kind in kinds:
            for _ in range(n):
                while True:
                    data = busy.ensure()
                    seconds = request(kind, data)
                    if busy.running():  # the job ran before and after: a busy sample
                        out[kind]["busy"].append(seconds)
                        print(f"  {kind} busy {seconds:.2f} s (load {_load()})", flush=True)
                        break
                _idle(pages, busy.release())
                idle_k += 1
                data = {**base, "target": target + "\n" * idle_k}  # no matrices: the span computes
                out[kind]["idle"].append(request(kind, data))
                print(f"  {kind} idle {out[kind]['idle'][-1]:.2f} s (load {_load()})", flush=True)
                if kind == "span":
                    _idle([client], data)
    finally:
        busy.close()
    return out


def _report(title: str, out: dict, load: str) -> None:
    print(f"\n{title}   (load before: {load})")
    print(f"{'request':<10} {'busy p50':>9} {'busy p95':>9} {'idle p50':>9} {'idle p95':>9} {'ratio p50':>10} {'ratio p95':>10}")
    for kind, d in out.items():
        bp50, bp95 = _stats(d["busy"])
        ip50, ip95 = _stats(d["idle"])
        print(f"{kind:<10} {bp50:9.2f} {bp95:9.2f} {ip50:9.2f} {ip95:9.2f} {bp50 / ip50:10.2f} {bp95 / ip95:10.2f}"
              f"   (n={len(d['busy'])}/{len(d['idle'])})")


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _long_prompt(client: Client, tokens: int) -> str:
    lines, k = [], 0
    while True:
        for _ in range(40):
            topic = ["the museum", "the harbour", "the library", "the bakery", "the station"][k % 5]
            lines.append(f"Note {k + 1}: {topic} opens at {7 + k % 5} am on day {k % 28 + 1}; "
                         f"visitors counted {100 + 7 * k} people.")
            k += 1
        text = "\n".join(lines) + "\nQuestion: when does the library open on day 3?"
        n = len(client.post(TOK, {"prompt": text, "chat": False})[1][fields.TOKENS])
        if n >= tokens:
            return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=10, help="samples of each request, busy and idle")
    p.add_argument("--tokens", type=int, default=0, help="also a prompt of about this many tokens (e.g. 4000)")
    p.add_argument("--long_n", type=int, default=3, help="clicked spans busy and idle on the long prompt")
    p.add_argument("--skip_short", action="store_true", help="only the long prompt")
    p.add_argument("--slice_s", type=float, default=None, help="the server's --slice_s (default: its own)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log", default=None, help="copy the server's log here at the end")
    p.add_argument("--two_clients", action="store_true", help="the job is another page's (module docstring)")
    p.add_argument("--burn", type=int, default=0, help="busy processes loading the CPU during the run")
    args = p.parse_args()
    rng = random.Random(args.seed)
    from lit_app.data import datasets  # pylint: disable=import-outside-toplevel

    row = next(r for r in datasets.get_datasets()["case_studies"].examples
               if r["case"] == CASE and "train leaves" in r["prompt"])
    server_args = ["--max_new_tokens", "64"] + (["--slice_s", str(args.slice_s)] if args.slice_s else [])
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(server_args, tmp) as server:
        client = Client(server, "bench-clicker" if args.two_clients else "")
        owner = Client(server, "bench-owner") if args.two_clients else None
        burning = burners(args.burn)
        try:
            print(f"server: {server.url}  load: {_load()}  (busy processes: {args.burn}; the job's page:"
                  f" {'another client' if owner else 'the clicking one'})")
            if not args.skip_short:
                seconds, first = client.post(SAL, {"prompt": row["prompt"], "detail": "span"})
                payload = first[fields.SALIENCE]
                response = payload["text"][payload["prompt_end"]:]
                n_targets = len(payload["target_logprobs"])
                print(f"first highlight of the chain-of-thought example (generation + span): {seconds:.2f} s;"
                      f" {len(payload['tokens'])} tokens, {n_targets} in the response")
                load = _load()
                out = measure(client, {"prompt": row["prompt"]}, response, ("span", "trace", "tokens"), args.n, rng,
                              owner)
                _report(f"chain-of-thought example ({len(payload['tokens'])} tokens), gradient job running vs idle",
                        out, load)
            if args.tokens:
                prompt = _long_prompt(client, args.tokens)
                target = " The library opens at 9 am on day 3, as note 3 says; the others differ."
                data = {"prompt": prompt, "target": target, "chat": False}
                n_tokens = len(client.post(TOK, data)[1][fields.TOKENS])
                load = _load()
                out = measure(client, {"prompt": prompt, "chat": False}, target, ("span",), args.long_n, rng, owner)
                _report(f"long prompt ({n_tokens} tokens, {client.n_targets(data)} targets), clicked span", out, load)
        finally:
            for proc in burning:
                proc.kill()
        print(f"\nload after: {_load()}")
        if args.log:
            with open(args.log, "w", encoding="utf-8") as f:
                f.write(server.log_path.read_text())


if __name__ == "__main__":
    main()
