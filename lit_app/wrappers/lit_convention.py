"""LIT's prompt-debugging convention for salience requests, answered by our salience wrapper.

LIT's built-in Sequence Salience module (`sequence-salience-module` in lit-nlp 1.3.1's
main.js; `lit_nlp/examples/prompt_debugging` builds the models it reads) drives three models
by name: `<name>` (generation: `response`), `_<name>_tokenizer` (`tokens`) and
`_<name>_salience`, to which it sends the datapoint with `target` (the chosen response) and
`target_mask` (0/1 per token of the tokenizer's `tokens`, 1 on the clicked span), asking for
the TokenScores fields of the salience model's output spec. It lists those fields as its
methods, selects `grad_l2` first and colours `grad_dot_input` with a signed scale.

Our wrappers follow the names; this module answers a `target_mask` request: the masked
tokens must be a contiguous run of target tokens (our methods explain target tokens given
everything before them; LIT's own HFSalienceModel also accepts prompt tokens), and the
answer is the exact salience of that span from one forward + backward (`SharedLM.quick`, the
same values as our module's first highlight), as `grad_l2` (gradient norm) and
`grad_dot_input` (gradient x input) over every token, aligned with `tokens`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lit_app.schema import fields


class MaskError(ValueError):
    """A `target_mask` that cannot be answered (the message names the field and the fix)."""


def mask_span(mask: Any, n_prompt: int, n_total: int) -> tuple[int, int]:
    """The target-token span [t0, t1) a LIT `target_mask` marks (over all `n_total` tokens)."""
    if not isinstance(mask, Sequence) or isinstance(mask, (str, bytes)):
        raise MaskError(f'"{fields.TARGET_MASK}" must be a list of 0/1 per token; got {type(mask).__name__}.')
    if len(mask) != n_total:
        raise MaskError(f'"{fields.TARGET_MASK}" has {len(mask)} entries but the prompt and target have {n_total}'
                        f' tokens (the tokenizer model\'s "{fields.TOKENS}"). Fix: one entry per token.')
    marked = []
    for i, v in enumerate(mask):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v not in (0, 1):
            raise MaskError(f'"{fields.TARGET_MASK}"[{i}] is {v!r}; use 0 or 1.')
        if v == 1:
            marked.append(i)
    if not marked:
        raise MaskError(f'"{fields.TARGET_MASK}" marks no token. Fix: set 1 on the target tokens to explain.')
    if marked[0] < n_prompt:
        raise MaskError(f'"{fields.TARGET_MASK}" marks prompt token {marked[0]} (the prompt has {n_prompt} tokens);'
                        " this model explains target tokens only. Fix: select tokens of the response.")
    if marked[-1] - marked[0] + 1 != len(marked):
        raise MaskError(f'"{fields.TARGET_MASK}" marks tokens {marked[0]}..{marked[-1]} with gaps; mark one'
                        " contiguous span.")
    return marked[0] - n_prompt, marked[-1] + 1 - n_prompt


def token_scores(shared: Any, chat: Any, target: str, mask: Any) -> Mapping[str, Any]:
    """{grad_l2: [N], grad_dot_input: [N], tokens: [N], span: (t0, t1)} for a LIT `target_mask` request."""
    if not target:
        raise MaskError(f'A "{fields.TARGET_MASK}" request needs the text to explain in "{fields.TARGET}"'
                        " (LIT's module sends the chosen response there).")
    tokens = shared.tokens(chat, target)
    n_prompt = len(shared.tokens(chat, ""))
    t0, t1 = mask_span(mask, n_prompt, len(tokens))
    result = shared.quick(chat, target, t0, t1)  # the gradient methods only (no counted method)
    out = {fields.TOKENS: tokens, "span": (t0, t1)}
    for field, method in ((fields.GRAD_L2, fields.GRAD_NORM_METHOD), (fields.GRAD_DOT_INPUT, fields.GRAD_X_INPUT_METHOD)):
        values = [float(v) for v in result.span_salience(method, t0, t1)]
        if len(values) != len(tokens):
            raise MaskError(f"{method}: {len(values)} values for {len(tokens)} tokens (tokenization mismatch).")
        out[field] = values
    return out
