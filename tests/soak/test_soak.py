"""Soak: the real server on 127.0.0.1 under concurrent valid and malformed requests.

Several page clients, each with its own client id (the header lit_app/edge/clients.py CLIENT_HEADER, as
the page sends one per page load), one anonymous script client (no id: it supersedes nothing) and one
hostile client, for `--soak-seconds` (default 20 s, part of `make test`; the long soak is on demand:
`pytest tests/soak -s --soak-seconds 600`, or `SOAK_SECONDS=600`). The page clients load the page
(index, /get_info, /get_dataset, the table's generations), generate, select datapoints (first highlight
+ background matrices, polled), click spans (with IG), tokenize, ask for every matrix at once (short
prompts), run segment jobs (leave one word out, polled to the end), per-token matrix jobs (IG or
SmoothGrad, polled to the end), cancel their own matrix jobs (`matrix_cancel`) and supersede their own
span requests (a newer span of the same client while its older one runs: the one place a 409 is
right). The script client generates, tokenizes, asks for every matrix at once and polls segment and
matrix jobs to the end. The hostile one sends malformed JSON, wrong types, huge prompts and bodies, unknown
models, bad Host / Origin / Content-Type headers, file endpoints pointed outside
`--data_dir`, other spellings of the API paths (`;params`, `%`-escapes, `//`,
trailing `/`, `..`), mistakes on LIT's own routes (unknown saved-data ids, UI-state
sync, LIT-encoded JSON objects, malformed chunked bodies), requests without the token
and cancelled connections to one `python -m lit_app.server` subprocess on the default
model. Asserted:

* every valid request gets the right answer: the same text and matrices as the
  library computes in this process (fixed prompts), or an answer that keeps the
  payload's invariants (fresh prompts); a 503 is retried after its Retry-After,
  as the browser's request guard does, and must succeed in the end; a 409 only where the
  same client superseded its own work (its newer span request; counted and printed per kind);
* every job a client keeps polling (segment and matrix jobs) finishes without restarting:
  its state never becomes "cancelled" or "none", a segment job's `done` never goes back, a
  matrix job keeps its job id; its answer keeps the payload's invariants;
* every invalid request gets its expected 4xx and a one-line body;
* the server stays up, and its RSS 10 s after the load ends is within `RSS_GROWTH_LIMIT`
  (15 %) of its value after warm-up (every request kind once, the matrix job once per extra method, one
  request at a time; then idle); its peak during the load (the kernel's VmHWM) within `RSS_PEAK_GROWTH_LIMIT`
  of its peak during the warm-up (no growth once every kind of work has run once), and within
  `RSS_PEAK_LIMIT` of the idle value after warm-up: one matrix pass in flight, not one per client (issue 43);
* nothing outside the data folder changes (a folder next to it, with a file the
  probes try to read and one they try to overwrite, is byte-for-byte the same),
  and no answer contains the outside file's content.

The load's first round gives every kind of the clients' mixes (the matrix job once per extra method) to one client
each (`Soak.first_rounds`), so that a run of any length starts every kind during the load (asserted); then each
client draws its kinds at random.

Printed: requests served, answers by kind and status, the 409s per kind, jobs started and finished per
kind, the kinds the load's clients started, each phase's wall and CPU (the server's, the clients'), the server's CPU
and peak RSS while each warm-up kind ran, and the RSS curve: after warm-up, every
minute (every tenth of the run when shorter than 10 minutes), at the end of the load and 10 s
later (docs/benchmarks.md, "Soak").
"""

from __future__ import annotations

import collections
import functools
import http.client
import json
import random
import re
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import sequence_salience as ss
from lit_app.schema import fields, method_registry
from sequence_salience.methods import leave_one_out
from tests.conftest import DEFAULT_SOAK_SECONDS
from tests.server_process import ServerProcess, client_header

pytestmark = pytest.mark.soak

MODEL = "smollm2"
GEN, SAL, TOK = fields.model_group_names(MODEL)
MAX_NEW_TOKENS = 8
MAX_PENDING = 4
PAGE_CLIENTS = 5  # each with its own client id (one per page load)
SCRIPT_CLIENTS = 1  # without a client id
HOSTILE_CLIENTS = 1
# RSS 10 s after the load ends, relative to RSS after warm-up (issue 33: 1,261 MB grew to 1,529 MB in 60 s and
# stayed: glibc kept freed model-pass memory; see lit_app/memory.py).
RSS_GROWTH_LIMIT = 0.15
# RSS during the load, relative to RSS after warm-up. Each client's per-token matrix job held its forward's graph
# across the other clients' turns: the 10-minute soak peaked at +105 % (2,380 MB of 1,163), four such jobs in one
# process at +78-81 % against +24-25 % for one (benchmarks/bench_concurrent_matrices.py). With one retained graph
# at a time (lit_app/model/scheduler.py) what remains is one pass in flight and malloc's unreturned pages
# (docs/benchmarks.md, "Session 30"). 40 % until session 34; since a gradient pass keeps its decoder layers' inputs
# only and a matrix chunk no vocabulary-sized gradients (a796c18) the load peaks within issue 43's 15 %: 10-minute
# soak +8.2 % against +29.5 % for the code before; 45 s soaks +9.1 %, +10.7 %, and +13.9 % once the first highlight's
# one-row pass runs its layers once to keep its keys and values (433dddc; beside browser tests), and a 10-minute soak
# +44.5 %. Since that pass recomputes its layers too (session 35), 10-minute soaks +12.4 % and +36.5 % (the second:
# a 64-step IG span with ~450 MB free but unreturned in malloc's heap; docs/benchmarks.md, "Session 35 (h1)"):
# issue 43's 15 % is not met reliably, and this limit fails on such a run. Since a span's steps run 2 rows of such a
# prompt per forward (span_graph_token_budget, session 36) one 10-minute run: +17.5 %, its top 5-7 clients' per-token
# matrix passes in flight at once (docs/benchmarks.md, "Session 36 (h1)"). Session 37: what those passes kept was
# MKL's buffer pool per thread (now off, lit_app/memory.py): malloc's memory in use with 5-6 in flight 426 -> ~245 MB,
# but the peak did not move (+16.0 % before, +16.5 / +17.0 / +16.0 % after): on these short prompts the pools were
# mostly untouched pages; what holds the peak now is not found ("Session 37 (h1)"). Session 38: glibc had raised its
# trim threshold to 64 MB (the model's load frees big mmapped blocks), so the thread arena kept ~45-50 MB of freed
# pages that malloc_trim does not reach (its top); fixed thresholds (lit_app/memory.py `fixed_malloc_thresholds`):
# 10-minute soaks +13.0 % and +13.9 % at load 8-14, and the lead's quiet run +14.8 % (against +16.0-18.2 % before).
# 0.2 stays: 0.2-2 points of margin, the quiet run the least, and the suite's 20 s soak runs beside other tests;
# what is left is live memory (+56-67 MB in use) and freed pages during the trimmer's gaps of up to 76 s, when no
# request ends and no job lets the model go ("Session 38 (h1)").
RSS_PEAK_LIMIT = 0.2
# The load's peak, relative to the warm-up's peak (every kind of work once, one request at a time): growth once every
# kind has run, or passes' memory piling up across clients. Several clients add what one cannot: a matrix job's
# forward graph held across a click's turn (up to `graph_token_budget` row-tokens: ~280 MB on the soak's 46-token
# prompts, ~1.5 MB per row-token) while the click's own graph (~200 MB for its 4 IG steps) is built, about +20 % over
# the warm-up's peak at worst; 45 s runs measured -2.0 % to +7.4 % (docs/benchmarks.md, "Session 32 (h2)"). Since
# session 34 (h1) a graph keeps the decoder layers' inputs only (they run again in the backward) and a matrix chunk
# carries no vocabulary-sized gradients: a click's pass peaks at ~90 MB, a matrix chunk at ~40 MB ("Session 34 (h1)").
RSS_PEAK_GROWTH_LIMIT = 0.25
RSS_SETTLE_S = 10
RETRY_FOR_S = 300  # a valid request answered 503 is retried this long (a loaded 2-core machine is slow)
JOB_LIMIT_S = 900  # a polled job that has not finished after this long fails (a failure bound, not a timing)
POLL_S = 0.7  # how often a client polls its job: the salience page's POLL_MS (frontend/src/salience/page.ts)
# IG steps / SmoothGrad samples of a polled per-token matrix job (`Soak.matrix_job`). The load's drain (clients
# polling the jobs they started to their end, ~90 s of a 45 s soak's ~180 s) is mostly these jobs' units, a
# backward per target and step: `make test`'s soak (--soak-seconds up to the default) runs 2 steps or samples, the
# same kinds and checks at ~60 % of the units (the gradient targets, then 2 x targets, against 4 x targets;
# docs/benchmarks.md, "Session 37 (h5)"); a longer soak runs 4, as the RSS figures in docs/benchmarks.md were
# measured with.
IN_SUITE_MATRIX_COUNT, LONG_SOAK_MATRIX_COUNT = 2, 4
# IG steps of `supersede_own_span`'s older span, which the same client's newer span replaces while it runs. Under the
# load the newer one was refused 503 (the model's queue full: 116-121 retries) until the older had run all its steps,
# and the other clients' requests waited behind it: with 64 the in-suite load cost the server ~55 s of CPU, with 16
# ~30 s (docs/benchmarks.md, "Session 39 (h4)"). The in-suite soak asks 16 (warm-up and load alike; a newer span still
# came while the older ran: 409 in the load), a longer soak 64, as the RSS figures were measured with.
IN_SUITE_SPAN_STEPS, LONG_SOAK_SPAN_STEPS = 16, 64
GEN_PROMPTS = ["What is the capital of France?", "Name a primary color.", "Say hi."]
SAL_CASES = [("What is the capital of France?", "Paris"), ("2+2=", "4"), ("The sky is", " blue today")]


OUTSIDE_MARKER = "soak-outside-marker-41c9"
# Other spellings of API paths: LIT would route each to an endpoint; the server refuses them (400).
SPELLINGS = ["/get_info;x", "/get_info;", "//get_info", "/get%5Finfo", "/get_info/", "/x/../get_info",
             "/get_info%3Bx", "/get_preds;a=b", "/%2Fget_preds", "/./get_preds", "/load_datapoints;x",
             "/save_datapoints;x", "/create_dataset;x", "/get_info%3Fx", "/get_info#x", "/GET_INFO/"]


def _kind_name(fn) -> str:
    """A client's kind of work: its function's name, the matrix job's with its extra method (matrix_job_ig)."""
    return getattr(fn, "__name__", None) or f"matrix_job_{fn.keywords['extra'].kind}"


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


class Server(ServerProcess):
    """Its own process, not the session's `lit_server`: start-up flags (--max_pending_requests, --data_dir,
    --max_new_tokens) and its RSS is measured, which another test's requests would change."""

    def __init__(self, tmp: Path, data_dir: Path):
        super().__init__(["--host", "127.0.0.1", "--max_new_tokens", str(MAX_NEW_TOKENS),
                          "--max_pending_requests", str(MAX_PENDING), "--data_dir", str(data_dir)], tmp)
        self.host = f"127.0.0.1:{self.port}"
        self.auth_line = "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())  # the token, for raw sockets

    def request(self, method: str, path: str, body: bytes | str | None = None, headers: dict | None = None,
                json_body: object = None, auth: bool = True) -> tuple[int, dict, str]:
        """Sends the headers exactly as given (with the token unless `auth=False`)."""
        h = {"Host": self.host, **(self.headers if auth else {})}
        if json_body is not None:
            body = json.dumps(json_body)
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for k, v in h.items():
                conn.putheader(k, v)
            data = body.encode() if isinstance(body, str) else body
            if data is not None:
                conn.putheader("Content-Length", str(len(data)))
            conn.endheaders(data)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8", "replace")
        finally:
            conn.close()


def _inputs(*examples) -> dict:
    return {"inputs": [{"id": f"x{i}", "data": ex} for i, ex in enumerate(examples)]}


@pytest.fixture(scope="module")
def references(default_lm):
    """Answers computed by the library in this process, independent of the server and LIT (on the session's default
    model: a worker that runs the soak and an integration test loads it once)."""
    lm = default_lm
    gen = {p: lm.generate(lm.format_prompt(p), ss.GenerationConfig(max_new_tokens=MAX_NEW_TOKENS)).text
           for p in GEN_PROMPTS}
    sal = {}
    for prompt, target in SAL_CASES:
        result = ss.compute_salience(lm, lm.format_prompt(prompt), target, methods=("grad_x_input",))
        sal[(prompt, target)] = (list(result.tokens), np.asarray(result.matrices["grad_x_input"]))
    return gen, sal


class Soak:
    """One soak run: the request kinds, their checks, and the tallies."""

    def __init__(self, server: Server, references, outside: Path, matrix_count: int, span_steps: int):
        self.s = server
        self.matrix_count = matrix_count  # IG steps or SmoothGrad samples of `matrix_job`
        self.span_steps = span_steps
        self.outside = outside
        self.gen_ref, self.sal_ref = references
        self.lock = threading.Lock()
        self.sent = collections.Counter()  # kind -> requests
        self.statuses = collections.Counter()  # (kind, status) -> answers
        self.retries_503 = 0
        self.failures: list[str] = []
        self.fresh = iter(range(10**9))
        self.local = threading.local()  # .client: the id the thread's requests carry ("" for the script client)
        self.superseded = collections.Counter()  # kind -> 409s of work its own client superseded
        self.jobs = collections.Counter()  # (kind, "started" | "finished") -> jobs polled to the end
        self.ran = collections.Counter()  # `_kind_name` -> times a client of the load started it

    # -- helpers -----------------------------------------------------------

    def fail(self, kind: str, msg: str) -> None:
        with self.lock:
            self.failures.append(f"{kind}: {msg}")

    def record(self, kind: str, status: int) -> None:
        with self.lock:
            self.sent[kind] += 1
            self.statuses[(kind, status)] += 1

    @property
    def client_id(self) -> str:
        """The client id of this thread's requests ("" for the script client: no header)."""
        return getattr(self.local, "client", "")

    def valid(self, kind: str, path: str, body: dict) -> object | None:
        """POSTs a valid request as this thread's client, retrying 503s after Retry-After; returns the JSON answer.

        A 409 fails: each client sends one request at a time, so no newer work of its own can have superseded
        it, and another client's work never supersedes it (lit_app/edge/clients.py).
        """
        give_up = time.monotonic() + RETRY_FOR_S
        while time.monotonic() < give_up:
            status, headers, text = self.s.request("POST", path, json_body=body, headers=client_header(self.client_id))
            self.record(kind, status)
            if status == 503:
                with self.lock:
                    self.retries_503 += 1
                if "retry-after" not in headers or "\n" in text:
                    self.fail(kind, f"503 without Retry-After or with a multi-line body: {text!r}")
                    return None
                time.sleep(float(headers["retry-after"]) * random.uniform(0.5, 1.0))
                continue
            if status != 200:
                self.fail(kind, f"HTTP {status}: {text[:300]!r}")
                return None
            return json.loads(text)
        self.fail(kind, f"still 503 after retrying for {RETRY_FOR_S} s")
        return None

    def invalid(self, kind: str, expected: int, method: str, path: str, body=None, headers=None, json_body=None,
                auth: bool = True, busy_ok: bool = False):
        """Sends a request that must be refused with `expected`; busy_ok: a 503 (the model queue is full) is
        accepted too, for mistakes only LIT finds (the request takes a slot before LIT sees it)."""
        status, _, text = self.s.request(method, path, body=body, headers=headers, json_body=json_body, auth=auth)
        self.record(kind, status)
        if busy_ok and status == 503:
            return
        if OUTSIDE_MARKER in text:
            self.fail(kind, f"the answer has the outside file's content: {path!r}")
        if status != expected:
            self.fail(kind, f"expected HTTP {expected}, got {status}: {text[:300]!r}")
        elif not text or "\n" in text or "Traceback" in text or 'File "' in text:
            self.fail(kind, f"error body is not one clean line: {text[:300]!r}")

    # -- valid requests ----------------------------------------------------

    def gen_fixed(self, rng: random.Random) -> None:
        prompt = rng.choice(GEN_PROMPTS)
        out = self.valid("valid_generate", f"/get_preds?model={GEN}", _inputs({"prompt": prompt}))
        if out is not None and out[0][fields.RESPONSE] != self.gen_ref[prompt]:
            self.fail("valid_generate", f"{prompt!r}: {out[0][fields.RESPONSE]!r} != {self.gen_ref[prompt]!r}")

    def sal_fixed(self, rng: random.Random) -> None:
        prompt, target = rng.choice(SAL_CASES)
        out = self.valid("valid_salience", f"/get_preds?model={SAL}",
                         _inputs({"prompt": prompt, "target": target}))
        if out is None:
            return
        tokens, ref = self.sal_ref[(prompt, target)]
        payload = out[0][fields.SALIENCE]
        got = np.asarray(payload["methods"]["grad_x_input"]["matrix"], dtype=np.float64)
        scale = float(np.abs(ref).max()) or 1.0
        if payload["tokens"] != tokens or got.shape != ref.shape or not np.allclose(got, ref, rtol=2e-3,
                                                                                     atol=2e-4 * scale):
            self.fail("valid_salience", f"{prompt!r}: payload differs from the library's result")

    def sal_fresh(self, rng: random.Random) -> None:
        k = next(self.fresh) * 7919 + rng.randrange(1000)
        target = f" {k}"
        out = self.valid("fresh_salience", f"/get_preds?model={SAL}",
                         _inputs({"prompt": f"Repeat the number {k}.", "target": target}))
        if out is None:
            return
        p = out[0][fields.SALIENCE]
        m = np.asarray(p["methods"]["grad_x_input"]["matrix"], dtype=np.float64)  # [T, N]
        n, n_prompt = len(p["tokens"]), p["n_prompt_tokens"]
        causal = all(not np.any(m[t, n_prompt + t:]) for t in range(m.shape[0]))
        if (out[0][fields.RESPONSE] != target or m.shape != (n - n_prompt, n) or not np.isfinite(m).all()
                or not causal or not np.any(m[:, :n_prompt])):
            self.fail("fresh_salience", f"payload for {k} breaks its invariants")

    def gen_fresh(self, rng: random.Random) -> None:
        k = next(self.fresh) * 7919 + rng.randrange(1000)
        out = self.valid("fresh_generate", f"/get_preds?model={GEN}", _inputs({"prompt": f"Write the number {k}."}))
        if out is not None:
            r = out[0]
            if not isinstance(r[fields.RESPONSE], str) or "".join(r[fields.RESPONSE_TOKENS]) != r[fields.RESPONSE]:
                self.fail("fresh_generate", f"bad generation {r!r}")

    def page_load(self, rng: random.Random) -> None:
        """What the browser asks when the page opens: the index, LIT's metadata and rows, the table's responses."""
        status, _, text = self.s.request("GET", "/")
        self.record("page_load", status)
        if status != 200 or "<html" not in text.lower():
            self.fail("page_load", f"GET / -> {status}")
            return
        if self.valid("page_load", "/get_info", {}) is None:
            return
        rows = self.valid("page_load", "/get_dataset?dataset_name=case_studies", {})
        if rows is None:
            return
        out = self.valid("page_load", f"/get_preds?model={GEN}&dataset_name=case_studies", {"inputs": rows})
        if out is not None and len(out) != len(rows):
            self.fail("page_load", f"{len(out)} responses for {len(rows)} rows")

    def select(self, rng: random.Random) -> None:
        """A datapoint selected: the first highlight now, the matrices in the background, polled."""
        k = next(self.fresh) * 7919 + rng.randrange(1000)
        ex = {"prompt": f"Name the number {k}.", "target": f" It is {k}."}
        out = self.valid("select_span", f"/get_preds?model={SAL}", _inputs({**ex, "detail": "span"}))
        if out is None:
            return
        values = out[0][fields.SPAN_SALIENCE]
        if "grad_x_input" not in values or not np.isfinite(np.asarray(values["grad_x_input"], dtype=float)).all():
            self.fail("select_span", f"first highlight without finite grad_x_input: {sorted(values)}")
        for _ in range(3):
            poll = self.valid("select_poll", f"/get_preds?model={SAL}", _inputs({**ex, "detail": "poll"}))
            if poll is None or poll[0][fields.SALIENCE].get("methods"):
                return
            time.sleep(0.5)

    def click_span(self, rng: random.Random) -> None:
        """A span of the response clicked, with integrated gradients (a few steps)."""
        prompt, target = rng.choice(SAL_CASES[::2])
        out = self.valid("click_span", f"/get_preds?model={SAL}", _inputs(
            {"prompt": prompt, "target": target, "detail": "span", "target_span": "0:1", "ig_steps": 4}))
        if out is not None and not {"grad_x_input", "integrated_gradients"} <= set(out[0][fields.SPAN_SALIENCE]):
            self.fail("click_span", f"span values {sorted(out[0][fields.SPAN_SALIENCE])}")

    def tokens(self, rng: random.Random) -> None:
        k = next(self.fresh) * 7919 + rng.randrange(1000)
        out = self.valid("tokens", f"/get_preds?model={TOK}", _inputs({"prompt": f"Say {k}.", "target": " Done."}))
        if out is not None and "".join(out[0][fields.TOKENS][-2:]) != " Done.":
            self.fail("tokens", f"tokens end {out[0][fields.TOKENS][-2:]!r}")

    # -- jobs polled to the end, cancellations -----------------------------

    def poll_job(self, kind: str, start: dict, poll: dict, one_sequence: bool) -> tuple[dict, list[dict]] | None:
        """Sends `start`, then polls with `poll` every POLL_S until the job has ended; returns (the last
        answer, the statuses seen). Fails when the job is cancelled or gone, restarts (its job id changes, its
        clock goes back while it runs, or with `one_sequence` its `done` goes back), or is still running after
        JOB_LIMIT_S. (A finished segment answer comes from the result cache and says "elapsed_s": 0.)

        one_sequence: the job counts one sequence of units (a segment job's rows). A matrix job counts several
          (the gradient pass's targets, then the IG steps or SmoothGrad samples: `done` starts again at 0 for the
          next, in the same job).
        """
        with self.lock:
            self.jobs[(kind, "started")] += 1
        body = start
        statuses: list[dict] = []
        give_up = time.monotonic() + JOB_LIMIT_S
        while time.monotonic() < give_up:
            out = self.valid(kind, f"/get_preds?model={SAL}", _inputs(body))
            if out is None:
                return None
            detail = out[0][fields.SALIENCE]["detail"]
            statuses.append(detail)
            before = statuses[-2] if len(statuses) > 1 else None
            if detail["state"] not in ("queued", "running", "done"):
                self.fail(kind, f"the job {detail['state']} while its client polled it: {detail}")
                return None
            if before is not None and (detail.get("job_id") != before.get("job_id")
                                       or (detail["state"] != "done" and detail["elapsed_s"] < before["elapsed_s"])
                                       or (one_sequence and detail["done"] < before["done"])):
                self.fail(kind, f"the job restarted while its client polled it: {before} then {detail}")
                return None
            if detail["state"] == "done":
                with self.lock:
                    self.jobs[(kind, "finished")] += 1
                return out[0], statuses
            body = poll
            time.sleep(POLL_S)
        self.fail(kind, f"the job still runs after {JOB_LIMIT_S} s of polling: {statuses[-1]}")
        return None

    def segment_job(self, rng: random.Random) -> None:
        """Leave one word out of a fresh prompt (no chat template: its words are the prompt's), polled to the end,
        as the page polls it: the same request again."""
        k = next(self.fresh) * 7919 + rng.randrange(1000)
        prompt = f"The {'page' if self.client_id else 'script'} client counts {k} apples and two pears"
        ex = {"prompt": prompt, "target": " Two.", "chat": False, fields.DETAIL: method_registry.SEGMENT_DETAIL,
              fields.SEGMENT_METHOD: leave_one_out.NAME, fields.GRANULARITY: "word"}
        got = self.poll_job("segment_job", ex, ex, one_sequence=True)
        if got is None:
            return
        seg = got[0][fields.SALIENCE][fields.SEGMENTS]
        words = [prompt[s:e].strip() for s, e in seg["spans"]]
        values = np.asarray(seg["values"], dtype=np.float64)
        if words != prompt.split() or values.shape != (len(words),) or not np.isfinite(values).all() or (
                seg["stats"]["rows"] != len(words) + 1):
            self.fail("segment_job", f"{prompt!r}: words {words}, values {seg['values']}, stats {seg['stats']}")

    def matrix_job(self, rng: random.Random, extra: method_registry.ExtraMethod | None = None) -> None:
        """A per-token matrix job (IG steps or SmoothGrad samples; `extra`, or one at random) of a fresh prompt,
        polled to the end."""
        extra = extra or rng.choice(method_registry.EXTRA_METHODS)
        k = next(self.fresh) * 7919 + rng.randrange(1000)
        ex = {"prompt": f"Double {k}.", "target": f" {2 * k}", extra.field: self.matrix_count}
        got = self.poll_job(f"matrix_job_{extra.kind}", {**ex, fields.DETAIL: extra.matrix_detail},
                            {**ex, fields.DETAIL: "poll"}, one_sequence=False)
        if got is None:
            return
        p = got[0][fields.SALIENCE]
        m = np.asarray(p["methods"][extra.method]["matrix"], dtype=np.float64)  # [T, N]
        n, n_prompt = len(p["tokens"]), p["n_prompt_tokens"]
        if m.shape != (n - n_prompt, n) or not np.isfinite(m).all() or not np.any(m[:, :n_prompt]):
            self.fail(f"matrix_job_{extra.kind}", f"{extra.method} matrix of {k} breaks its invariants: {m.shape}")

    def cancel_matrix(self, rng: random.Random) -> None:
        """The page switched away from a running IG matrix job: `matrix_cancel` with its id stops it."""
        k = next(self.fresh) * 7919 + rng.randrange(1000)
        ex = {"prompt": f"Halve {k}.", "target": f" {k / 2}", fields.IG_STEPS: 64}
        out = self.valid("cancel_matrix", f"/get_preds?model={SAL}", _inputs({**ex, fields.DETAIL: "ig_matrix"}))
        if out is None:
            return
        job = out[0][fields.SALIENCE]["detail"].get("job_id")
        time.sleep(rng.uniform(0, 1))
        out = self.valid("cancel_matrix", f"/get_preds?model={SAL}",
                         _inputs({**ex, fields.DETAIL: "matrix_cancel", fields.MATRIX_JOB: job}))
        if out is not None and out[0][fields.SALIENCE]["detail"].get("job_id") != job:
            self.fail("cancel_matrix", f"matrix_cancel of {job!r} answered {out[0][fields.SALIENCE]['detail']}")

    def supersede_own_span(self, rng: random.Random) -> None:
        """A span with many IG steps, then a newer span of the same datapoint from the same client while it runs
        (the user clicked another span): the older answers 409 "Cancelled: a newer selection replaced this
        request." (or 200 when it ended first); the newer answers 200."""
        k = next(self.fresh) * 7919 + rng.randrange(1000)
        ex = {"prompt": f"Count to {k}.", "target": f" One, two, {k}.", fields.DETAIL: "span"}
        older = self.s.send_json(f"/get_preds?model={SAL}", _inputs({**ex, fields.IG_STEPS: self.span_steps}),
                                 client=self.client_id)
        try:
            time.sleep(rng.uniform(0.2, 1.5))
            newer = self.valid("supersede_own_span", f"/get_preds?model={SAL}", _inputs({**ex, fields.TARGET_SPAN: "0:1"}))
            answer = older.getresponse()
            text = answer.read().decode("utf-8", "replace")
        finally:
            older.close()
        self.record("superseded_own_span", answer.status)
        if answer.status == 503 and "retry-after" in {k.lower() for k, _ in answer.getheaders()}:
            return  # the model's queue was full when it came (MAX_PENDING): nothing was superseded
        if answer.status == 409 and text.startswith("Cancelled: a newer selection replaced this request."):
            with self.lock:
                self.superseded["superseded_own_span"] += 1
        elif answer.status != 200:
            self.fail("superseded_own_span", f"HTTP {answer.status}: {text[:300]!r}")
        if newer is not None and not newer[0][fields.SPAN_SALIENCE]:
            self.fail("supersede_own_span", "the newer span has no values")

    # -- invalid requests --------------------------------------------------

    def malformed_json(self, rng):
        self.invalid("malformed_json", 400, "POST", f"/get_preds?model={SAL}", body='{"inputs": [',
                     headers={"Content-Type": "application/json"})

    def wrong_types(self, rng):
        ex = rng.choice([{"prompt": 12}, {"prompt": "hi", "ig_steps": "lots"}, {"prompt": ["a"]},
                         {"prompt": "hi", "chat": "perhaps"}, {"prompt": "hi", "target_span": 4}])
        self.invalid("wrong_types", 400, "POST", f"/get_preds?model={SAL}", json_body=_inputs(ex))

    def huge_prompt(self, rng):
        self.invalid("huge_prompt", 400, "POST", f"/get_preds?model={GEN}",
                     json_body=_inputs({"prompt": "word " * 8000}))

    def too_many_ig_steps(self, rng):
        self.invalid("ig_steps_limit", 400, "POST", f"/get_preds?model={SAL}",
                     json_body=_inputs({"prompt": "hi", "ig_steps": 100_000}))

    def huge_body(self, rng):
        # Claims 64 MiB: refused from the header alone, before any byte of the body is read.
        with socket.create_connection(("127.0.0.1", self.s.port), timeout=60) as sock:
            sock.sendall((f"POST /get_preds?model={GEN} HTTP/1.1\r\nHost: {self.s.host}\r\n{self.s.auth_line}"
                          "Content-Type: application/json\r\nContent-Length: 67108864\r\n\r\n").encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            status = int(head.split()[1]) if head else 0
            length = int(re.search(rb"Content-Length: (\d+)", head).group(1)) if status else 0
            while len(rest) < length:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                rest += chunk
        self.record("huge_body", status)
        if status != 413 or b"\n" in rest:
            self.fail("huge_body", f"expected a one-line 413, got {status}: {rest[:200]!r}")

    def unknown_model(self, rng):
        self.invalid("unknown_model", 400, "POST", "/get_preds?model=gpt5", json_body=_inputs({"prompt": "hi"}))

    def bad_host(self, rng):
        self.invalid("bad_host", 403, "POST", f"/get_preds?model={GEN}", json_body=_inputs({"prompt": "hi"}),
                     headers={"Host": f"rebind.example:{self.s.port}"})

    def bad_origin(self, rng):
        self.invalid("bad_origin", 403, "POST", f"/get_preds?model={GEN}", json_body=_inputs({"prompt": "hi"}),
                     headers={"Origin": "http://evil.example"})

    def text_plain(self, rng):
        self.invalid("text_plain_post", 403, "POST", f"/get_preds?model={GEN}",
                     body=json.dumps(_inputs({"prompt": "hi"})), headers={"Content-Type": "text/plain"})

    def file_endpoint(self, rng):
        outside = self.outside
        path, body = rng.choice([
            ("/create_dataset?dataset_name=jsonl_prompts", {"config": {"new_name": "x", "path": "/etc/passwd"}}),
            ("/create_dataset?dataset_name=jsonl_prompts", {"config": {"new_name": "y", "path": f"{outside}/secret.jsonl"}}),
            (f"/load_datapoints?dataset_name=case_studies&path={outside}/secret.jsonl", {"inputs": []}),
            ("/load_datapoints?dataset_name=case_studies&path=../outside/secret.jsonl", {"inputs": []}),
            (f"/save_datapoints?dataset_name=case_studies&path={outside}/victim", {"inputs": []}),
        ])
        self.invalid("file_endpoint", 403, "POST", path, json_body=body)

    def spelled_path(self, rng):
        spelled = rng.choice(SPELLINGS)
        query = rng.choice(["", "?dataset_name=case_studies&path=" + str(self.outside / "secret.jsonl"),
                            f"?model={GEN}"])
        body = rng.choice([{"inputs": [{"id": "a", "data": {"prompt": "x" * 120_000}}]},
                           {"config": {"new_name": "z", "path": str(self.outside / "secret.jsonl")}}, {}])
        method = rng.choice(["GET", "POST"])
        self.invalid("spelled_path", 400, method, spelled + query, json_body=body if method == "POST" else None,
                     headers={"Sec-Fetch-Site": "cross-site"} if method == "GET" else None)

    def lit_route_mistake(self, rng):
        path, body, status = rng.choice([
            ("/fetch_new_data?saved_datapoints_id=nope", {}, 404),
            ("/remove_new_data?saved_datapoints_id=nope", {}, 404),
            ("/push_ui_state?dataset_name=case_studies", {"inputs": []}, 403),
            ("/get_info", {"x": {"__name__": "NoSuchType"}}, 400),
            (f"/get_preds?model={TOK}", _inputs({"prompt": "hi", "x": {"__class__": "np.ndarray"}}), 400),
            ("/create_dataset?dataset_name=jsonl_prompts", {"config": {"new_name": "n", "path": 2}}, 400),
        ])
        self.invalid("lit_route_mistake", status, "POST", path, json_body=body, busy_ok=True)

    def bad_chunk(self, rng):
        with socket.create_connection(("127.0.0.1", self.s.port), timeout=60) as sock:
            sock.sendall((f"POST /get_preds?model={TOK} HTTP/1.1\r\nHost: {self.s.host}\r\n{self.s.auth_line}"
                          "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"
                          ).encode())
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        status = int(answer.split()[1]) if answer.startswith(b"HTTP/") else 0
        self.record("bad_chunk", status)
        if status != 400:
            self.fail("bad_chunk", f"expected 400, got {answer[:200]!r}")

    def no_token(self, rng):
        self.invalid("no_token", 403, "POST", f"/get_preds?model={GEN}", json_body=_inputs({"prompt": "hi"}),
                     auth=False)

    # -- cancelled connections ---------------------------------------------

    def cancel_mid_body(self, rng):
        with socket.create_connection(("127.0.0.1", self.s.port), timeout=60) as sock:
            sock.sendall((f"POST /get_preds?model={SAL} HTTP/1.1\r\nHost: {self.s.host}\r\n{self.s.auth_line}"
                          "Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"inputs\": [").encode())
        self.record("cancel_mid_body", 0)

    def cancel_before_answer(self, rng):
        k = next(self.fresh) * 7919 + rng.randrange(1000)
        body = json.dumps(_inputs({"prompt": f"Spell {k}.", "target": f" {k}"})).encode()
        with socket.create_connection(("127.0.0.1", self.s.port), timeout=60) as sock:
            sock.sendall((f"POST /get_preds?model={SAL} HTTP/1.1\r\nHost: {self.s.host}\r\n{self.s.auth_line}Content-Type:"
                          f" application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
        self.record("cancel_before_answer", 0)

    def connect_and_close(self, rng):
        socket.create_connection(("127.0.0.1", self.s.port), timeout=60).close()
        self.record("connect_and_close", 0)

    # -- the run -----------------------------------------------------------

    def page_kinds(self):
        """A page client's mix: page loads, generations, selections, span clicks, tokens, every matrix at once,
        segment and matrix jobs polled to the end, cancellations of its own work."""
        return [(self.page_load, 0.5), (self.gen_fixed, 1), (self.gen_fresh, 0.5), (self.select, 2),
                (self.click_span, 2), (self.tokens, 1), (self.sal_fixed, 1), (self.sal_fresh, 0.5),
                (self.segment_job, 1), (self.matrix_job, 1), (self.cancel_matrix, 0.5), (self.supersede_own_span, 0.5)]

    def script_kinds(self):
        """The script client's mix (no client id): generations, tokens, every matrix at once, polled jobs."""
        return [(self.gen_fixed, 1), (self.gen_fresh, 0.5), (self.tokens, 1), (self.sal_fixed, 1),
                (self.sal_fresh, 0.5), (self.segment_job, 1), (self.matrix_job, 1)]

    def each_kind(self, *mixes) -> list:
        """Every kind of the mixes once (by `_kind_name`), then the matrix job once per extra method (IG, SmoothGrad)
        where a mix has it."""
        kinds = {fn.__name__: fn for mix in mixes for fn, _ in mix}
        if kinds.pop(self.matrix_job.__name__, None):
            kinds.update({f"matrix_job_{e.kind}": functools.partial(self.matrix_job, extra=e)
                          for e in method_registry.EXTRA_METHODS})
        return list(kinds.values())

    def warm_up_kinds(self):
        """Every valid kind once, the matrix job once per extra method: every pass the load runs has run once
        before the RSS baseline."""
        return self.each_kind(self.page_kinds(), self.script_kinds())

    def first_rounds(self, mixes: list, seed: int = 0) -> list[list]:
        """The load's first round: every kind of the clients' `mixes` once, in a seeded order, each given to the
        client with the fewest so far among those whose mix has it, so that the load starts every kind (every job
        kind and request kind) in a run of any length, and no client runs much more than its share."""
        kinds = self.each_kind(*mixes)
        random.Random(seed).shuffle(kinds)
        names = [{_kind_name(fn) for fn in self.each_kind(mix)} for mix in mixes]
        rounds: list[list] = [[] for _ in mixes]
        for fn in kinds:
            owner = min((i for i, has in enumerate(names) if _kind_name(fn) in has), key=lambda i: len(rounds[i]))
            rounds[owner].append(fn)
        return rounds

    def hostile_kinds(self):
        return [(self.malformed_json, 1), (self.wrong_types, 1), (self.huge_prompt, 1), (self.too_many_ig_steps, 1),
                (self.huge_body, 1), (self.unknown_model, 1), (self.bad_host, 1), (self.bad_origin, 1),
                (self.text_plain, 1), (self.file_endpoint, 1), (self.spelled_path, 1.5), (self.no_token, 0.5),
                (self.lit_route_mistake, 1.5), (self.bad_chunk, 0.5), (self.cancel_mid_body, 1),
                (self.cancel_before_answer, 0.5), (self.connect_and_close, 1)]

    def client(self, seed: int, deadline: float, kinds, client_id: str = "", first=()) -> None:
        """Sends `first` once each, in order, even past `deadline` (its share of the load's first round), then
        `kinds` (function, weight) at random until `deadline`, as `client_id` ("": no client id); a job it started
        is polled to its end."""
        self.local.client = client_id
        rng = random.Random(seed)
        fns, weights = zip(*kinds)
        schedule = iter(first)
        while len(self.failures) < 20:
            fn = next(schedule, None)
            if fn is None:
                if time.monotonic() >= deadline:
                    break
                fn = rng.choices(fns, weights)[0]
                if fn == self.matrix_job:  # the draw matrix_job makes itself, made here to count it per method
                    fn = functools.partial(fn, extra=rng.choice(method_registry.EXTRA_METHODS))
            with self.lock:
                self.ran[_kind_name(fn)] += 1
            try:
                fn(rng)
            except Exception as e:  # pylint: disable=broad-except
                self.fail(_kind_name(fn), f"client-side exception {type(e).__name__}: {e}")


def test_soak(tmp_path, references, request):
    seconds = request.config.getoption("--soak-seconds")
    data, outside = tmp_path / "data", tmp_path / "outside"
    data.mkdir()
    outside.mkdir()
    (outside / "secret.jsonl").write_text(json.dumps({"prompt": OUTSIDE_MARKER}) + "\n", encoding="utf-8")
    (outside / "victim.lit.jsonl").write_text("keep me\n", encoding="utf-8")
    before = _snapshot(outside), _snapshot(data)
    (tmp_path / "server").mkdir()
    # phase -> (wall, the server's CPU, this process's CPU: the clients) when it began, seconds; printed, never asserted
    phases = {"start": (time.monotonic(), 0.0, time.process_time())}
    server = Server(tmp_path / "server", data)

    def phase(name: str) -> None:
        phases[name] = (time.monotonic(), server.cpu_s(), time.process_time())

    try:
        phase("warm-up")
        in_suite = seconds <= DEFAULT_SOAK_SECONDS
        soak = Soak(server, references, outside, IN_SUITE_MATRIX_COUNT if in_suite else LONG_SOAK_MATRIX_COUNT,
                    IN_SUITE_SPAN_STEPS if in_suite else LONG_SOAK_SPAN_STEPS)
        rng = random.Random(0)
        soak.local.client = "soak-warm-up"
        warm_peaks = {}  # kind -> the server's peak RSS while it ran (and what the kind before left running)
        warm_cpu = {}  # kind -> the server's CPU seconds while it ran (printed)
        for fn in soak.warm_up_kinds():  # warm up every valid path once, one request at a time
            server.reset_peak()
            cpu = server.cpu_s()
            fn(rng)
            warm_peaks[_kind_name(fn)] = server.memory_kib("VmHWM") / 1024
            warm_cpu[_kind_name(fn)] = server.cpu_s() - cpu
        soak.local.client = ""
        phase("idle after warm-up")
        server.wait_until_idle(quiet_cpu_s=0.02, every_s=2)
        rss_warm = server.memory_kib() / 1024
        peak_warm = max(warm_peaks.values())  # one client, every pass once: one pass in flight at a time
        server.reset_peak()
        rss_peak = rss_warm
        every = min(60.0, max(5.0, seconds / 10))
        samples = [(0.0, rss_warm)]
        deadline = time.monotonic() + seconds
        clients = ([(i + 1, soak.page_kinds(), f"soak-page-{i + 1}") for i in range(PAGE_CLIENTS)]
                   + [(50 + i, soak.script_kinds(), "") for i in range(SCRIPT_CLIENTS)]
                   + [(100 + i, soak.hostile_kinds(), "") for i in range(HOSTILE_CLIENTS)])
        first = soak.first_rounds([mix for _, mix, _ in clients])
        threads = [threading.Thread(target=soak.client, args=(seed, deadline, mix, client_id, mine), daemon=True)
                   for (seed, mix, client_id), mine in zip(clients, first)]
        phase("load")
        start = phases["load"][0]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            rss = server.memory_kib() / 1024
            rss_peak = max(rss_peak, rss)
            if time.monotonic() - start >= samples[-1][0] + every:
                samples.append((time.monotonic() - start, rss))
                print(f"  soak {samples[-1][0]:5.0f} s: RSS {rss:6.0f} MB ({rss / rss_warm - 1:+.1%} of warm-up)",
                      flush=True)
            time.sleep(0.5)
        elapsed = time.monotonic() - start
        phase("idle after the load")
        rss_load_end = server.memory_kib() / 1024
        rss_peak = max(rss_peak, server.memory_kib("VmHWM") / 1024)  # the kernel's peak: none between samples
        server.wait_until_idle(quiet_cpu_s=0.02, every_s=2)
        phase("settle")
        time.sleep(RSS_SETTLE_S)
        rss_after = server.memory_kib() / 1024
        alive = server.proc.poll() is None
        phase("final check")
        final = soak.valid("final_check", f"/get_preds?model={GEN}", _inputs({"prompt": GEN_PROMPTS[0]}))
        phase("end")
        names, marks = list(phases), list(phases.values())
        print("\nPer phase, wall / the server's CPU / the clients' CPU (s): "
              + ", ".join(f"{n} {b[0] - a[0]:.1f} / {b[1] - a[1]:.1f} / {b[2] - a[2]:.1f}"
                          for n, a, b in zip(names, marks, marks[1:]))
              + f"; the load ran {elapsed - seconds:+.1f} s past its {seconds:g} s (clients finishing their jobs)")
        print("Server CPU during each warm-up kind (s): " + ", ".join(f"{k} {c:.1f}" for k, c in warm_cpu.items()))

        total = sum(soak.sent.values())
        print(f"\nSoak: {PAGE_CLIENTS} page clients (each its own client id) + {SCRIPT_CLIENTS} script client (no id)"
              f" + {HOSTILE_CLIENTS} hostile, {elapsed:.0f} s, {total} requests ({total / elapsed:.1f}/s), 503 retried:"
              f" {soak.retries_503}")
        for kind in sorted(soak.sent):
            by_status = ", ".join(f"{st or 'no answer'}: {n}" for (k, st), n in sorted(soak.statuses.items())
                                  if k == kind)
            print(f"  {kind:22s} {soak.sent[kind]:5d}  ({by_status})")
        conflicts = collections.Counter({k: n for (k, st), n in soak.statuses.items() if st == 409})
        print("409 per kind (only a client's own newer span may supersede its older one): "
              + (", ".join(f"{k}: {n}" for k, n in sorted(conflicts.items())) or "none"))
        job_kinds = sorted({k for k, _ in soak.jobs})
        print(f"Jobs polled to the end (finished / started; matrix jobs of {soak.matrix_count} steps or samples): "
              + ", ".join(f"{k}: {soak.jobs[(k, 'finished')]} / {soak.jobs[(k, 'started')]}" for k in job_kinds))
        print("Kinds the load's clients started (the first round each once, then at random): "
              + ", ".join(f"{k}: {n}" for k, n in sorted(soak.ran.items())))
        print("Server peak RSS during each warm-up kind (MB): "
              + ", ".join(f"{k} {m:.0f} ({m / rss_warm - 1:+.1%})" for k, m in warm_peaks.items()))
        print(f"Server RSS: after warm-up {rss_warm:.0f} MB (its peak during the warm-up {peak_warm:.0f} MB,"
              f" {peak_warm / rss_warm - 1:+.1%}), peak during the load {rss_peak:.0f} MB ({rss_peak / rss_warm - 1:+.1%};"
              f" {rss_peak / peak_warm - 1:+.1%} of the warm-up's peak), at the end of the load"
              f" {rss_load_end:.0f} MB, {RSS_SETTLE_S} s later {rss_after:.0f} MB ({rss_after / rss_warm - 1:+.1%});"
              " curve (s, MB): " + ", ".join(f"{t:.0f}: {m:.0f}" for t, m in samples)
              + f", end: {rss_load_end:.0f}, +{RSS_SETTLE_S} s: {rss_after:.0f}")

        assert alive, server.log_tail()
        assert not soak.failures, "\n".join(soak.failures[:20])
        assert (_snapshot(outside), _snapshot(data)) == before, "a file outside (or in) the data folder changed"
        assert soak.statuses[("spelled_path", 400)] > 0 and soak.statuses[("file_endpoint", 403)] > 0
        assert final is not None and final[0][fields.RESPONSE] == soak.gen_ref[GEN_PROMPTS[0]]
        valid_answered = sum(n for (k, st), n in soak.statuses.items()
                             if st == 200 and k in ("valid_generate", "valid_salience", "fresh_salience", "select_span"))
        assert valid_answered >= 3, "the soak answered almost no valid request"
        assert soak.statuses[("valid_salience", 200)] > 0, "no blocking salience answer was checked"
        assert conflicts == soak.superseded, f"409s {dict(conflicts)}; of a client's own superseded span: {soak.superseded}"
        every_kind = {_kind_name(fn) for fn in soak.each_kind(*(mix for _, mix, _ in clients))}
        assert set(soak.ran) == every_kind, f"kinds the load never started: {sorted(every_kind - set(soak.ran))}"
        assert all(soak.jobs[(k, "finished")] == soak.jobs[(k, "started")] for k in job_kinds), soak.jobs
        assert soak.jobs[("segment_job", "finished")] > 0 and any(
            soak.jobs[(k, "finished")] for k in job_kinds if k.startswith("matrix_job")), soak.jobs
        assert rss_after <= rss_warm * (1 + RSS_GROWTH_LIMIT), (
            f"RSS {rss_after:.0f} MB, {rss_after / rss_warm - 1:+.1%} of its {rss_warm:.0f} MB after warm-up")
        assert rss_peak <= peak_warm * (1 + RSS_PEAK_GROWTH_LIMIT), (
            f"RSS peaked at {rss_peak:.0f} MB during the load, {rss_peak / peak_warm - 1:+.1%} of its {peak_warm:.0f} MB"
            " peak during the warm-up (every kind of work once): growth, or passes' memory piling up?")
        assert rss_peak <= rss_warm * (1 + RSS_PEAK_LIMIT), (
            f"RSS peaked at {rss_peak:.0f} MB during the load, {rss_peak / rss_warm - 1:+.1%} of its {rss_warm:.0f} MB"
            " after warm-up: more than one matrix pass held its memory at once?")
        if "Traceback" in server.log_path.read_text():
            print("Server log has tracebacks (internal errors):\n" + server.log_tail())
        assert "Traceback" not in server.log_path.read_text(), "the server hit an internal error"
    finally:
        server.stop()
