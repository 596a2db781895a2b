"""The LIT layer's facts per salience method: the extra methods a request turns on with a count.

`EXTRA_METHODS` is the one table of the methods computed only when a request asks for them
(integrated gradients, SmoothGrad): their count field, background-job kind, matrix `detail`
value, count unit and largest count. Input parsing (lit_app/inputs.py), the payload
(lit_app/payloads.py), the shared model (lit_app/shared_model.py), the salience wrapper and
the HTTP limits read it.
"""

from __future__ import annotations

import dataclasses

from lit_app import fields

MAX_IG_STEPS = 256
MAX_SMOOTH_GRAD_SAMPLES = 256


@dataclasses.dataclass(frozen=True)
class ExtraMethod:
    """A method computed only when a request asks for it, with a count (0 = off).

    Attributes:
      method: the core library's name.
      field: the input field carrying the count; also the `SalienceConfig` attribute it sets.
      kind: the background job's kind prefix; the job of count n is f"{kind}{n}".
      matrix_detail: the `detail` value that starts its per-token matrix job.
      unit: what the count counts; the payload key of its method entry.
      maximum: the largest count a request may ask for.
    """

    method: str
    field: str
    kind: str
    matrix_detail: str
    unit: str
    maximum: int


EXTRA_METHODS: tuple[ExtraMethod, ...] = (
    ExtraMethod(fields.IG_METHOD, fields.IG_STEPS, "ig", "ig_matrix", "steps", MAX_IG_STEPS),
    ExtraMethod(fields.SMOOTH_GRAD_METHOD, fields.SMOOTH_GRAD_SAMPLES, "sg", "smooth_grad_matrix", "samples",
                MAX_SMOOTH_GRAD_SAMPLES),
)
EXTRA_BY_METHOD = {e.method: e for e in EXTRA_METHODS}
