"""Segment methods through the LIT app on the default model (`detail="segments"`, docs/architecture.md
"Segment salience"), behind the server's HTTP rules (security.SecureApp): the values equal
`sequence_salience.ablation.segment_salience` called directly on the same model; a newer segment request
of the datapoint cancels the older job; client mistakes are 400 with a message naming the field.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from werkzeug.test import Client

from sequence_salience.ablation import AblationConfig, segment_salience
from sequence_salience.methods import ablation_surrogate, attention_verified, leave_one_out
from lit_app.edge import clients, security, security_config
from lit_app.data import datasets
from lit_app.schema import fields, inputs, method_registry
from lit_app.model import progressive
from tests.unit.waiting import wait_until

PORT = 5433
HOST = f"127.0.0.1:{PORT}"
MODEL = "smollm2"
_, SAL, _ = fields.model_group_names(MODEL)
DETAIL = method_registry.SEGMENT_DETAIL


def _row() -> dict:
    """The constitutional-principles case study (a typed target: nothing to generate)."""
    rows = datasets.get_datasets()["case_studies"].examples
    row = next(r for r in rows if r["case"] == "constitutional principles")
    return {k: row[k] for k in ("prompt", "system", "target")}


@pytest.fixture(scope="module")
def shared(make_shared):
    return make_shared(max_new_tokens=8)


@pytest.fixture(scope="module")
def client(lit):
    return Client(security.SecureApp(lit, security_config.SecurityConfig(port=PORT)), use_cookies=False)


# The requests of this file come from one page (lit_app/edge/clients.py): its newer selection supersedes its older work.
PAGE = "page"


def _post(client, data):
    body = json.dumps({"inputs": [{"id": "r", "data": data}]})
    return client.post(f"/get_preds?model={SAL}", data=body, content_type="application/json",
                       headers={"Host": HOST, clients.CLIENT_HEADER: PAGE})


def _wait_for(condition, what: str, limit_s: float = 600):
    """Polls `condition` (a failure bound, not a timing assertion)."""
    wait_until(condition, what, guard_s=limit_s, poll_s=0.05)


def _until_done(client, **extra) -> dict:
    answer = {}

    def done() -> bool:
        response = _post(client, {**_row(), fields.DETAIL: DETAIL, **extra})
        assert response.status_code == 200, response.get_data(as_text=True)[:400]
        answer["out"] = json.loads(response.data)[0][fields.SALIENCE]
        assert answer["out"]["detail"]["state"] in ("queued", "running", "done"), answer["out"]
        return answer["out"]["detail"]["state"] == "done"

    _wait_for(done, "the segment job")
    return answer["out"]


@pytest.mark.parametrize("method,extra,config", [
    pytest.param(leave_one_out.NAME, {}, AblationConfig(), id="leave-one-sentence-out"),
    pytest.param(ablation_surrogate.NAME, {ablation_surrogate.METHOD.count_field: 8, fields.TARGET_SPAN: "0:4"},
                 AblationConfig(surrogate_masks=8), id="surrogate-8-first-tokens"),
])
def test_values_equal_the_core_library_on_the_default_model(client, default_lm, method, extra, config):
    out = _until_done(client, **{fields.SEGMENT_METHOD: method, **extra})
    seg = out[fields.SEGMENTS]
    row = _row()
    span = inputs.parse_target_span(extra.get(fields.TARGET_SPAN), 1 << 30)
    want = segment_salience(default_lm, default_lm.format_prompt(row["prompt"], system=row["system"]), row["target"],
                            method, granularity="sentence", span=span, config=config)
    assert seg["spans"] == [list(s) for s in want.segments] and len(want.segments) >= 5
    # float32 model: the server's forward batches are sized by time (slices), the direct call's by count,
    # so rows are summed in other batch shapes; log p of the target (~-30 over 20 tokens) then differs in
    # the 5th-6th digit (seen: 3e-5).
    np.testing.assert_allclose(seg["values"], want.values, rtol=1e-3, atol=3e-4)
    np.testing.assert_allclose(seg["token_values"], want.token_values(), rtol=1e-3, atol=3e-4)
    assert seg["stats"]["rows"] == want.stats.rows and seg["warning"] == want.warning
    if method == ablation_surrogate.NAME:
        assert seg["quality"]["r2"] == pytest.approx(want.quality["r2"], rel=1e-3, abs=1e-3)


def test_the_confirming_leave_one_out_measures_only_what_the_first_map_did_not_verify(make_shared, default_lm):
    """Issue 42 §5 on the constitutional row at sentence granularity: after the first map (attention_verified, its
    verified sentences exact leave-one-out), the server's leave-one-out job scores only the sentences it did not
    verify, and its values equal the library's full leave one out (a server of its own: nothing cached before); asked
    first (`known_detail`, as a fresh page asks to state the button's cost), the server names those verified ones."""
    from lit_app.serving import model_group

    fresh = make_shared(max_new_tokens=8)
    row = _row()
    chat = default_lm.format_prompt(row["prompt"], system=row["system"])
    model = model_group.lit_models(fresh, MODEL)[SAL]
    # What a page asks before it states the leave-one-out button's cost (`known_detail`): no job, no model pass.
    ask = {**row, fields.DETAIL: method_registry.SEGMENT_KNOWN_DETAIL, fields.SEGMENT_METHOD: leave_one_out.NAME,
           fields.GRANULARITY: "sentence"}
    assert model.predict([ask])[0][fields.SALIENCE][fields.KNOWN_EXACT] is None
    first = fresh.segment_salience(chat, row["target"], inputs.SegmentRequest(
        attention_verified.NAME, "sentence", None, "filler", None, 0))
    known = model.predict([ask])[0][fields.SALIENCE][fields.KNOWN_EXACT]
    assert known == {"method": attention_verified.NAME, "measured": int(first.measured_mask().sum())}
    got = fresh.segment_salience(chat, row["target"], inputs.SegmentRequest(
        leave_one_out.NAME, "sentence", None, "filler", None, 0))
    want = segment_salience(default_lm, chat, row["target"], leave_one_out.NAME, granularity="sentence")
    assert got.segments == want.segments == first.segments
    np.testing.assert_allclose(got.values, want.values, rtol=1e-3, atol=3e-4)  # batch shapes differ (test above)
    unverified = int((~first.measured_mask()).sum())
    assert got.stats.rows - 1 == unverified < want.stats.rows - 1  # the forwards it ran: the unverified sentences
    assert len(want.segments) - known["measured"] == unverified  # what the page's button states, less the unedited one


def test_a_newer_segment_request_cancels_the_older_job(client, shared):
    group = inputs.datapoint_group(_row())
    old = {fields.SEGMENT_METHOD: leave_one_out.NAME, fields.GRANULARITY: "word"}  # ~50 forwards: still running
    new = {fields.SEGMENT_METHOD: leave_one_out.NAME, fields.GRANULARITY: "paragraph"}
    assert _post(client, {**_row(), fields.DETAIL: DETAIL, **old}).status_code == 200
    job = shared.jobs.get(group, inputs.segment_request(old).job_kind)
    _wait_for(lambda: job.state == progressive.RUNNING and job.done > 0, "the word job to report progress")
    assert _until_done(client, **new)[fields.SEGMENTS]["granularity"] == "paragraph"
    assert job.state == progressive.CANCELLED and job.done < job.total, job.status()


@pytest.mark.parametrize("extra,field", [
    pytest.param({fields.SEGMENT_METHOD: "occlusion"}, fields.SEGMENT_METHOD, id="unknown-method"),
    pytest.param({fields.SEGMENT_METHOD: leave_one_out.NAME, fields.GRANULARITY: "chapter"}, fields.GRANULARITY,
                 id="granularity"),
    pytest.param({fields.SEGMENT_METHOD: leave_one_out.NAME, fields.REMOVAL: "blank"}, fields.REMOVAL, id="removal"),
    pytest.param({fields.SEGMENT_METHOD: leave_one_out.NAME, fields.GRANULARITY: "regex", fields.PATTERN: "(?<=a)b"},
                 fields.PATTERN, id="pattern"),
    pytest.param({fields.SEGMENT_METHOD: leave_one_out.NAME, fields.GRANULARITY: "regex", fields.PATTERN: "zqzq"},
                 fields.GRANULARITY, id="no-removable-segments"),
])
def test_client_mistakes_are_400_naming_the_field(client, extra, field):
    deadline = time.monotonic() + 300
    while True:  # a refusal found by the job comes with a later poll of the same request
        response = _post(client, {**_row(), fields.DETAIL: DETAIL, **extra})
        if response.status_code != 200:
            break
        assert time.monotonic() < deadline, "the refusal never came"
        time.sleep(0.05)
    text = response.get_data(as_text=True)
    assert response.status_code == 400, text[:400]
    assert f'"{field}"' in text and "\n" not in text.strip(), text[:400]
