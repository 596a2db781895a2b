"""Numbers the page states before a run equal the ones the server and the core library use.

"Reduce prompt" shows its budget before it starts (frontend/src/explain/logic.ts REDUCE_BUDGET);
the salience module holds IG's completeness error to the tolerance the server publishes in the payload
(`completeness`, lit_app/wrappers/payloads.py), the one "Test this explanation → IG steps" aims for: the page
keeps no copy of it.
"""

import re

from sequence_salience.explain.reduction import ReductionConfig
from tests import frontend_source


def _exported_number(name: str) -> float:
    pattern = re.compile(rf"export const {name}\s*=\s*([0-9.]+)\s*;")
    found = [float(m.group(1)) for p in frontend_source.SRC.rglob("*.ts") for m in pattern.finditer(p.read_text())]
    assert len(found) == 1, (name, found)
    return found[0]


def test_reduce_budget_text_states_the_servers_budget():
    from lit_app.wrappers import explain

    text = frontend_source.exported_string("REDUCE_BUDGET")
    assert f"{explain.REDUCE_MAX_SECONDS:g} s" in text, text
    assert f"{ReductionConfig().max_steps} candidate checks" in text, text


def test_ig_warning_tolerance_is_the_ig_steps_tolerance_and_the_page_keeps_no_copy():
    from lit_app.wrappers import explain
    from sequence_salience.display import view

    assert explain.IG_AUTO_TOLERANCE == view.IG_TOLERANCE
    copies = [p for p in frontend_source.SRC.rglob("*.ts") if re.search(r"\bIG_TOLERANCE\s*=", p.read_text())]
    assert copies == []  # the browser reads the payload's `completeness` tolerance
