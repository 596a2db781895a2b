"""Tokenization with exact character offsets, and chat prompts with role spans."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from sequence_salience.errors import SalienceError

ROLES = ("system", "user", "assistant", "markup")


@dataclasses.dataclass(frozen=True)
class TokenizedText:
    """Token ids of `text`; token k covers text[offsets[k][0]:offsets[k][1]].

    Spans are disjoint and in order. Special tokens added by the tokenizer (BOS) have
    empty spans; special tokens written in the text (chat markers such as <|im_start|>)
    cover their characters. When byte-level BPE splits one character into several
    pieces, the last piece holds the character and the earlier ones are empty (the same
    rule as decoding a generation, model.decode_with_offsets).
    """

    text: str
    ids: tuple[int, ...]
    offsets: tuple[tuple[int, int], ...]
    special: tuple[bool, ...]

    def __len__(self) -> int:
        return len(self.ids)


@dataclasses.dataclass(frozen=True)
class ChatPrompt:
    """Model input text plus which character spans are template markup vs. message content.

    role_spans: (start, end, role) covering `text` in order, role in ROLES.
    templated: True when built by a chat template (its text carries its own
      special markers, so the tokenizer must not add BOS again).
    """

    text: str
    role_spans: tuple[tuple[int, int, str], ...]
    templated: bool = True


def tokenize(tokenizer, text: str, add_special_tokens: bool = False) -> TokenizedText:
    """Tokenizes `text` with character offsets. Needs a fast (Rust) tokenizer."""
    if not getattr(tokenizer, "is_fast", False):
        raise SalienceError(
            f"{type(tokenizer).__name__} is a slow tokenizer without character offsets. "
            "Fix: load the model with a fast tokenizer (tokenizer.json), e.g. AutoTokenizer(use_fast=True)."
        )
    enc = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
    ids = tuple(int(i) for i in enc["input_ids"])
    special_ids = set(tokenizer.all_special_ids)
    offsets = [(int(s), max(int(s), int(e))) for s, e in enc["offset_mapping"]]
    # Byte-level BPE splits one character (CJK, emoji) into pieces that all report the
    # character's span. Make spans disjoint: the piece that completes the character keeps
    # it, earlier pieces keep only what precedes it (e.g. a leading space) or become empty.
    next_start = len(text)  # start of the nearest following non-empty span
    for k in range(len(offsets) - 1, -1, -1):
        start, end = offsets[k]
        if start <= next_start < end:
            offsets[k] = (start, next_start)
            end = next_start
        if end > start:
            next_start = start
    special = tuple(i in special_ids for i in ids)
    return TokenizedText(text=text, ids=ids, offsets=tuple(offsets), special=special)


def build_chat_prompt(tokenizer, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True) -> ChatPrompt:
    """Applies the tokenizer's chat template and records where each message's content lies.

    The template is rendered once with a unique sentinel in place of each message's
    content, which locates the content exactly even when a role name or the content
    also appears in the markup.
    """
    for m in messages:
        if m.get("role") not in ROLES[:3]:
            raise SalienceError(f"Unknown chat role {m.get('role')!r}. Fix: use one of system, user, assistant.")
    sentinels = [f"\x00SSMSG{k}\x00" for k in range(len(messages))]
    marked = [{"role": m["role"], "content": s} for m, s in zip(messages, sentinels)]
    try:
        skeleton = tokenizer.apply_chat_template(marked, tokenize=False, add_generation_prompt=add_generation_prompt)
        real = tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt
        )
    except Exception as e:  # jinja errors, e.g. templates that require alternating roles
        raise SalienceError(f"The chat template rejected these messages: {e}. Fix: check the roles' order.") from e
    text_parts: list[str] = []
    spans: list[tuple[int, int, str]] = []
    pos = 0
    rest = skeleton
    for message, sentinel in zip(messages, sentinels):
        before, found, rest_after = rest.partition(sentinel)
        if not found:
            break
        if before:
            spans.append((pos, pos + len(before), "markup"))
            text_parts.append(before)
            pos += len(before)
        content = message["content"]
        if content:
            spans.append((pos, pos + len(content), message["role"]))
            text_parts.append(content)
            pos += len(content)
        rest = rest_after
    else:
        if rest:
            spans.append((pos, pos + len(rest), "markup"))
            text_parts.append(rest)
        if "".join(text_parts) == real:
            if not any(m["role"] == "system" for m in messages):
                spans = _label_default_system(tokenizer, messages, add_generation_prompt, real, spans)
            return ChatPrompt(text=real, role_spans=tuple(spans), templated=True)
    # The template transforms content (e.g. trims it): fall back to one markup span
    # per gap found by searching the contents in order.
    return _spans_by_search(real, messages)


def _label_default_system(tokenizer, messages, add_generation_prompt, text, spans):
    """Labels a system prompt that the template inserts by itself (SmolLM2, Qwen) as "system".

    With an explicit system sentinel the template renders A + <sys> + B + <first message> ...;
    without one it renders X + <first message> .... When X is A + D + B, D is the default
    system content, found inside the first markup span.
    """
    first = "\x00SSFIRST\x00"
    try:
        with_sys = tokenizer.apply_chat_template(
            [{"role": "system", "content": "\x00SSSYS\x00"}, {"role": messages[0]["role"], "content": first}],
            tokenize=False, add_generation_prompt=add_generation_prompt)
        without = tokenizer.apply_chat_template(
            [{"role": messages[0]["role"], "content": first}], tokenize=False, add_generation_prompt=add_generation_prompt)
    except Exception:  # templates that reject a system role
        return spans
    head, _, tail = with_sys.partition("\x00SSSYS\x00")
    before_sys, sep, _ = tail.partition(first)
    prefix = without.partition(first)[0]
    if not sep or not prefix.startswith(head) or not prefix.endswith(before_sys):
        return spans
    default = prefix[len(head):len(prefix) - len(before_sys)]
    if not default or not spans or spans[0][2] != "markup" or not text.startswith(prefix):
        return spans
    start, end = len(head), len(head) + len(default)
    first_markup_end = spans[0][1]
    return [(0, start, "markup"), (start, end, "system"), (end, first_markup_end, "markup")] + list(spans[1:])


def _spans_by_search(text: str, messages: Sequence[Mapping[str, str]]) -> ChatPrompt:
    spans: list[tuple[int, int, str]] = []
    pos = 0
    for m in messages:
        content = m["content"].strip()
        idx = text.find(content, pos) if content else -1
        if idx < 0:
            continue
        if idx > pos:
            spans.append((pos, idx, "markup"))
        spans.append((idx, idx + len(content), m["role"]))
        pos = idx + len(content)
    if pos < len(text):
        spans.append((pos, len(text), "markup"))
    return ChatPrompt(text=text, role_spans=tuple(spans), templated=True)
