"""A comparison (`_<model>_compare`, lit_app/wrappers/compare.py) is superseded by the same page's newer comparison,
on the real server (the session's `lit_server`, the default model).

Was (docs/benchmarks.md, "Session 41 (h4)"): Compare models asked the whole response's salience with SmoothGrad's
default 8 samples, the user typed 4, and the 8-sample run went on to 8/8 (99 s at load 22) with nothing to stop it
but its end, while the 4-sample comparison the user waited for queued behind it. A salience span of the module is
superseded by its page's newer span ("a newer selection replaced this request", tests/integration/test_disconnect.py);
a comparison now is too, by its page's newer comparison of the same view.
"""

from __future__ import annotations

import re

import pytest

from lit_app.schema import fields
from tests.server_process import ServerProcess

pytestmark = pytest.mark.integration

MODEL = "smollm2"
COMPARE = fields.compare_model_name(MODEL)
PAGE = "test-compare-superseded"
OLD_SAMPLES = 256  # the most a request may ask (32 chunks of 8): still running when the newer comparison comes
NEW_SAMPLES = 2  # the user changed the count (2: little work on a loaded machine)
# After the newer comparison is answered, the longest wait for the older one's answer: a failure bound, not a timing
# claim. Superseded, the older stops at its next chunk, before the newer gets the model; on main it ran on to its
# last sample (minutes), which this bound turns into a failure instead of a wait for all of them.
OLDER_ANSWER_BOUND_S = 180
PROMPT = "Compare models, superseded: name three mountains of the Alps."
TARGET = " Mont Blanc, the Matterhorn and the Eiger."
# Compare models' request for one model's whole-response salience: the selected datapoint "pinned" to itself.
DATA = {fields.PROMPT: PROMPT, fields.TARGET: TARGET, fields.PINNED_PROMPT: PROMPT, fields.PINNED_TARGET: TARGET,
        fields.CHAT: False, fields.WITH_PINNED_SALIENCE: True, fields.SMOOTH_GRAD_SAMPLES: OLD_SAMPLES,
        fields.COMPARE_VIEW: fields.COMPARE_VIEW_MODELS}
# salience_runs.log_progress's line for this prompt (its start names it).
PROGRESS = re.compile(r"salience smooth_grad: (\d+)/(\d+) \(prompt 'Compare models, superseded")


def test_a_comparison_is_stopped_by_its_pages_newer_comparison(lit_server: ServerProcess):
    server = lit_server
    start = len(server.log_path.read_text())

    def progress() -> list[tuple[int, int]]:
        return [(int(d), int(t)) for d, t in PROGRESS.findall(server.log_path.read_text()[start:])]

    old = server.send_json(f"/get_preds?model={COMPARE}", {"inputs": [{"id": "r", "data": DATA}]}, client=PAGE)
    try:
        seen = server.wait_for(progress, lambda p: any(t == OLD_SAMPLES for _, t in p),
                               "the old comparison's first SmoothGrad samples")
        newer = server.preds(COMPARE, {**DATA, fields.SMOOTH_GRAD_SAMPLES: NEW_SAMPLES}, client=PAGE)
        old.sock.settimeout(OLDER_ANSWER_BOUND_S)
        try:
            answer = old.getresponse()
        except TimeoutError:
            pytest.fail(f"the older comparison still ran {OLDER_ANSWER_BOUND_S} s after the newer one was answered"
                        f" (nothing stopped it); progress {progress()[-3:]}")
        body = answer.read().decode()
    finally:
        old.close()
    # The newer comparison is answered, with the count it asked for.
    pinned = newer[fields.COMPARE]["pinned_salience"]
    assert pinned is not None and pinned["methods"]["smooth_grad"]["samples"] == NEW_SAMPLES, pinned["methods"]
    # The older one: the 409 a superseded span gets, saying how far it got (before the end).
    assert answer.status == 409, body[:2000]
    assert body.startswith("Cancelled: a newer selection replaced this request."), body
    stopped = re.search(r"stopped after (\d+) of (\d+) SmoothGrad samples", body)
    assert stopped and int(stopped[2]) == OLD_SAMPLES, body
    done_before = max(d for d, t in seen if t == OLD_SAMPLES)
    assert done_before <= int(stopped[1]) < OLD_SAMPLES, (seen, body)
    ran = [d for d, t in progress() if t == OLD_SAMPLES]
    assert max(ran) < OLD_SAMPLES, ran  # the log: never ran to the end
    log = server.log_path.read_text()[start:]
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
