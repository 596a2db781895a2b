"""Issue 43 in the browser at 1280x720, against the session's real server on the default model: a page closed
while its long background job runs, and another page beside it.

Page B, a page load of its own (its own client id, lit_app/edge/clients.py), is ready on the simple question with
integrated gradients; page A selects the same row and starts the per-token IG matrix at its own step count (a
background job: no connection of its own keeps it alive, only the page's polls). A is closed while its job runs:

- the server cancels A's job as the page closes: the page's `pagehide` sends `detail="page_closed"`
  (frontend/src/salience/page_exit.ts, lit_app/wrappers/salience.py `_page_closed`), so its one log line names
  "its page was closed", not the heartbeat's "nobody polled it for" (the session server's `--job_heartbeat_s`,
  tests/conftest.py SESSION_JOB_HEARTBEAT_S: what stops the jobs of a page that dies without a pagehide, e.g. a
  crash; tests/integration/test_disconnect.py), and the job's status (the "poll" the page read, sent once more as
  A's client) says "cancelled" with units left (was it removed, the job would run to its end: "done");
- B's click on a word of the answer, sent right after A closed, is answered by the
  server (a span request with IG: it always goes to the server) and the page shows that token's map.

The seconds from the close to the cancellation and to B's answer are printed, not asserted.
Screenshots go to artifacts/e2e/page_closed/.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse

import pytest

from lit_app.edge.clients import CLIENT_HEADER
from lit_app.schema import fields
from tests.conftest import SESSION_JOB_HEARTBEAT_S
from tests.e2e import plugin_checks
from tests.server_process import client_header

pytestmark = pytest.mark.e2e

SIMPLE = "What is the capital of France?"
IG_MATRIX = "ig_matrix"  # lit_app/schema/method_registry.py LIT_FACTS
# A's per-token IG job: the gradient targets, then STEPS steps for each of the answer's tokens (7: 140 units), far
# more than runs before A closes (A reads its first units done, then closes: the job is still on its gradient targets),
# cancelled when its page closes (within one slice); B's clicked span: 6 steps, one chunk. A's IG span of STEPS runs
# before its job: 48 steps cost the test ~12 s more of CPU for nothing it reads (docs/benchmarks.md, "Session 37
# (h5)"). Not 16, the page's default count, which selecting IG sends first.
STEPS = plugin_checks.IG_STEPS_OF_ITS_OWN["page_closed"]
CLICK_STEPS = plugin_checks.IG_STEPS_OF_ITS_OWN["other_page_click"]
KIND = f"ig{STEPS}"
# A failure bound on A's job starting, not a timing: at load 11-12 the IG span of STEPS before it took 120 s.
JOB_START_LIMIT_S = 600
# The job's one line when it stops, or when it ends (lit_app/model/jobs_table.py `JobTable._work`).
ENDED = re.compile(rf"Cancelled the {KIND} job for .* \((?P<reason>[^)]*)\) after [\d.]+ s at (?P<done>\d+)/(?P<total>\d+)"
                   rf"|{KIND} job done in")


def _use_ig(mod, steps: int) -> None:
    mod.locator("select.method").select_option("integrated_gradients")
    field = mod.locator("input.ig-steps")
    field.fill(str(steps))
    field.dispatch_event("change")


def _shot(page, artifacts_dir, name: str) -> None:
    plugin_checks.screenshot(page, artifacts_dir / "page_closed", name)


def test_a_closed_pages_job_is_cancelled_and_another_pages_click_is_answered(lit_server, server_url, chromium,
                                                                              browser_page, artifacts_dir):
    from playwright.sync_api import expect

    log_start = len(lit_server.log_path.read_text())
    # Page B first: another page load (a context of its own, as another tab or person), ready with IG on the row.
    # A then finds the row's first matrices done (B's), so its IG job is the first in its queue.
    ctx_b = chromium.new_context(viewport=plugin_checks.SMALL_SCREEN)
    try:
        page_b = ctx_b.new_page()
        page_b.set_default_timeout(60_000)
        mod_b = plugin_checks.open_and_select(page_b, server_url, SIMPLE)
        # The page names the span of every span request (frontend/src/salience/request.ts): the whole answer "0:<n>".
        whole = lambda r: "_salience" in r.url and r.status == 200 and any(
            d.get(fields.DETAIL) == "span" and str(d.get(fields.TARGET_SPAN, "")).startswith("0:")
            and d.get(fields.IG_STEPS) == CLICK_STEPS for d in plugin_checks.request_inputs(r.request.post_data))
        with page_b.expect_response(whole, timeout=plugin_checks.LOAD_TIMEOUT_MS):  # B's map of the whole answer
            _use_ig(mod_b, CLICK_STEPS)

        page_a, _ = browser_page
        mod_a = plugin_checks.open_and_select(page_a, server_url, SIMPLE)
        _use_ig(mod_a, STEPS)
        started = []  # (path, data, client id) of A's request that starts its per-token IG job
        statuses = []  # that job's statuses as A read them

        def on_response(r) -> None:
            if "_salience" not in r.url:
                return
            for data in plugin_checks.request_inputs(r.request.post_data):
                if data.get(fields.DETAIL) == IG_MATRIX and data.get(fields.IG_STEPS) == STEPS:
                    parsed = urllib.parse.urlsplit(r.url)
                    started.append((f"{parsed.path}?{parsed.query}", data,
                                    r.request.headers.get(CLIENT_HEADER.lower(), "")))
                if data.get(fields.DETAIL) in (IG_MATRIX, "poll") and data.get(fields.IG_STEPS) == STEPS:
                    try:
                        statuses.append(r.json()[0][fields.SALIENCE]["detail"])
                    except (ValueError, KeyError, IndexError, TypeError):
                        pass

        page_a.on("response", on_response)
        mod_a.locator("input.ig-per-token").check()
        deadline = time.monotonic() + JOB_START_LIMIT_S
        while not (statuses and (statuses[-1].get("state") == "running" and statuses[-1].get("done", 0) > 0
                                 or statuses[-1].get("state") in ("done", "error", "cancelled"))):
            assert time.monotonic() < deadline, f"page A's {KIND} job never ran: {statuses[-3:]}"
            page_a.wait_for_timeout(200)  # the page's responses are read while Playwright waits
        page_a.remove_listener("response", on_response)

        path, data, client_a = started[0]
        last = statuses[-1]
        assert client_a, "page A sent no client id"
        assert last["kind"] == KIND and last["state"] == "running" and last["done"] < last["total"], (
            f"page A's job is not running any more before its page closed: {last}; give it more steps")
        _shot(page_a, artifacts_dir, "a-job-running")
        page_a.close()  # nobody polls A's job from here on
        closed = time.monotonic()

        # B clicks a word of the answer at once: the server answers the span.
        targets = mod_b.locator(".response .tgt")
        clicked = lambda r: "_salience" in r.url and any(
            d.get(fields.TARGET_SPAN) == "1:2" and d.get(fields.IG_STEPS) == CLICK_STEPS and d.get(fields.DETAIL) == "span"
            for d in plugin_checks.request_inputs(r.request.post_data))
        with page_b.expect_response(clicked, timeout=plugin_checks.LOAD_TIMEOUT_MS) as answer:
            targets.nth(1).click()
        answered_s = time.monotonic() - closed
        assert answer.value.status == 200, answer.value.text()[:300]
        assert "integrated_gradients" in answer.value.json()[0][fields.SPAN_SALIENCE], answer.value.text()[:300]
        expect(mod_b.locator(".target-desc")).to_contain_text(re.compile(r"^token 2 of \d+"))
        _shot(page_b, artifacts_dir, "b-click-answered")

        # The server: A's job ends cancelled, because its page was closed, with units left.
        ended = lit_server.wait_for(lambda: ENDED.search(lit_server.log_path.read_text()[log_start:]),
                                    lambda m: m is not None, f"the end of page A's {KIND} job")
        cancelled_s = time.monotonic() - closed
        status, _, text = lit_server.post_json(
            path, {"inputs": [{"id": "page-closed-check", "data": {**data, fields.DETAIL: "poll", "_id": "page-closed-check"},
                               "meta": {"added": True}}]}, client_header(client_a))
        assert status == 200, text[:300]
        job = json.loads(text)[0][fields.SALIENCE]["detail"]
        print(f"\npage A closed at {last['done']} of {last['total']} (its last poll); B's click answered after"
              f" {answered_s:.1f} s; A's job: {ended[0]!r}, logged {cancelled_s:.1f} s after the close"
              f" (heartbeat {SESSION_JOB_HEARTBEAT_S} s); its status: {job}")
        assert ended["reason"] == "its page was closed", (
            f"page A's job was not stopped by its page closing (pagehide -> page_closed): {ended[0]!r}")
        assert int(ended["done"]) < int(ended["total"]), ended[0]
        assert job["kind"] == KIND and job["state"] == "cancelled" and job["done"] < job["total"], job
    finally:
        ctx_b.close()
