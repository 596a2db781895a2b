"""Training and evaluation prompts for the attention estimator, generated here from a seed (no hub, no network).

Four kinds, as the prompts researchers debug:

* ``notes``: paragraphs of notes on several subjects, one of which holds the fact a closing question asks
  for; the target states the fact (`fact_paragraph` says which paragraph holds it).
* ``principles``: a system prompt of numbered principles, then a request one principle decides; the target
  follows that principle.
* ``few_shot``: labelled examples, then a new item; the target is its label.
* ``chain_of_thought``: worked arithmetic problems, then a new one; the target reasons and answers.

Splits: "train" and "eval" draw names, places, objects and topics from disjoint halves of the word pools
(even and odd entries), and each prompt from its own seeded generator, so no evaluation fact or entity is
ever seen in calibration. None of the text comes from the shipped rows (lit_app/data/: its case studies;
tests/unit/test_attention.py checks that no sentence is shared).

Length: each prompt grows, a paragraph or example at a time, until it reaches a length drawn log-uniformly
between the bounds, counted by the caller's `count` (the model's tokenizer; by default ~4 characters a
token).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

KINDS = ("notes", "principles", "few_shot", "chain_of_thought")
SPLITS = ("train", "eval")

_NAMES = ["Amara", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ingrid", "Jonas", "Kavya",
          "Lukas", "Mina", "Nikolai", "Olga", "Pedro", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wanda",
          "Xiomara", "Yusuf", "Zofia", "Anselm", "Beatrix", "Cyrus", "Delphine"]
_PLACES = ["Harbor Street", "the north warehouse", "Maple Hall", "the river depot", "Cedar Lane", "the east annex",
           "Granite Yard", "the old mill", "Willow Court", "the west tower", "Birch Plaza", "the glass pavilion",
           "Pine Ridge", "the lower dock", "Aspen Row", "the south gate", "Elm Square", "the clock house",
           "Oak Terrace", "the boat shed"]
_OBJECTS = ["storage room", "server cabinet", "bicycle locker", "archive safe", "tool chest", "mail box",
            "supply closet", "generator shed", "key box", "loading bay"]
_TOPICS = ["the weekly market", "the repair schedule", "the garden club", "the library hours", "the bus timetable",
           "the recycling plan", "the choir rehearsal", "the chess tournament", "the bakery order", "the roof survey",
           "the sailing course", "the museum tour", "the tax forms", "the painting class", "the football pitch",
           "the winter fair", "the water meter", "the school play", "the dentist visit", "the parking permit"]
_FILLER = [
    "{name} wrote that {topic} went as planned this month.",
    "Nobody raised any concerns about {topic} at the last meeting.",
    "{name} will send a short summary of {topic} next week.",
    "The notes on {topic} were filed with the other papers.",
    "{name} mentioned that {topic} needs two more volunteers.",
    "A reminder about {topic} was posted near {place}.",
    "The budget for {topic} stays the same as last year.",
    "{name} asked whether {topic} could start an hour earlier.",
    "Several people said that {topic} was easier to follow this time.",
    "There were no changes to {topic} since the spring.",
]
_PRINCIPLES = [
    ("Always answer in one short sentence.", "Tell me about {topic}.", " {topic_cap} is on schedule."),
    ("Never share a customer's phone number.", "What is {name}'s phone number?",
     " I am sorry, I cannot share a customer's phone number."),
    ("Recommend {place} to visitors who ask where to meet.", "Where should we meet?", " You could meet at {place}."),
    ("Refuse to give medical advice and suggest a doctor.", "Which pills should I take for my headache?",
     " I cannot give medical advice; please ask a doctor."),
    ("Sign every answer with the name {name}.", "Can you confirm my booking?", " Your booking is confirmed. - {name}"),
    ("Answer questions about prices with the words 'see the price list'.", "How much does {topic} cost?",
     " Please see the price list."),
]
_OTHER_PRINCIPLES = [
    "Be polite and patient with every user.", "Do not invent facts you were not given.",
    "Keep personal data private.", "Use plain words that a child would understand.",
    "Mention safety rules when people ask about tools.", "Do not discuss politics.",
    "Offer to help with anything else at the end.", "Write dates as day, month and year.",
    "Prefer metric units.", "Point people to the help desk for account problems.",
    "Never promise a delivery date.", "Thank users who report a mistake.",
]
_REVIEWS = {
    "positive": ["The {obj} was easy to use and worked the first time.", "I loved the visit to {place}.",
                 "{name} was helpful and friendly.", "Great value, I would buy the {obj} again.",
                 "The class about {topic} was fun and clear."],
    "negative": ["The {obj} broke after two days.", "The trip to {place} was a waste of time.",
                 "{name} never answered my emails.", "Too expensive for what the {obj} does.",
                 "The talk about {topic} was boring and far too long."],
}


@dataclasses.dataclass(frozen=True)
class GeneratedPrompt:
    """One generated prompt: id, kind, split, the user text (and system text), the target to explain, and for
    `notes` the index of the paragraph holding the fact (else -1)."""

    id: str
    kind: str
    split: str
    user: str
    system: str | None
    target: str
    fact_paragraph: int = -1

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _pool(words: list[str], split: str) -> list[str]:
    return words[SPLITS.index(split)::2]


def _approx_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


class _Words:
    def __init__(self, rng: np.random.Generator, split: str):
        self.rng = rng
        self.names, self.places = _pool(_NAMES, split), _pool(_PLACES, split)
        self.objects, self.topics = _pool(_OBJECTS, split), _pool(_TOPICS, split)

    def pick(self, items: list[str]) -> str:
        return items[int(self.rng.integers(len(items)))]

    def binding(self) -> dict[str, str]:
        topic = self.pick(self.topics)
        return dict(name=self.pick(self.names), place=self.pick(self.places), obj=self.pick(self.objects),
                    topic=topic, topic_cap=topic[0].upper() + topic[1:])

    def fill(self, template: str, binding: dict[str, str] | None = None) -> str:
        return template.format(**(binding or self.binding()))

    def paragraph(self, sentences: int) -> str:
        return " ".join(self.fill(_FILLER[int(self.rng.integers(len(_FILLER)))]) for _ in range(sentences))


def _grow(build: Callable[[int], str], length: int, count: Callable[[str], int], limit: int = 400) -> int:
    """The smallest n (pieces) whose build(n) is at least `length` long (or `limit`)."""
    n = 1
    while n < limit and count(build(n)) < length:
        n += 1
    return n


def _notes(w: _Words, length: int, count) -> tuple[str, None, str, int]:
    place, obj = w.pick(w.places), w.pick(w.objects)
    code = int(w.rng.integers(1000, 10000))
    fact = f"The code for the {obj} at {place} is {code}."
    paragraphs = [w.paragraph(int(w.rng.integers(2, 6))) for _ in range(400)]
    slot = w.rng.random()
    question = f"\n\nQuestion: what is the code for the {obj} at {place}?"

    def build(n: int) -> str:
        paras = list(paragraphs[:n])
        k = min(n - 1, int(slot * n))
        paras[k] = paras[k] + " " + fact
        return "\n\n".join(paras) + question

    n = _grow(build, length, count)
    return build(n), None, f" The code for the {obj} at {place} is {code}.", min(n - 1, int(slot * n))


def _principles(w: _Words, length: int, count) -> tuple[str, str, str, int]:
    rule, request, answer = _PRINCIPLES[int(w.rng.integers(len(_PRINCIPLES)))]
    binding = w.binding()  # one draw for the rule, the request and the answer
    rule, request, answer = (w.fill(t, binding) for t in (rule, request, answer))
    others = [_OTHER_PRINCIPLES[i] for i in w.rng.permutation(len(_OTHER_PRINCIPLES))]
    extra = [w.paragraph(2) for _ in range(400)]
    slot = w.rng.random()

    def build(n: int) -> str:
        items = (others + extra)[:n]
        items.insert(int(slot * (len(items) + 1)), rule)
        return "You are the assistant of a community centre. Keep to the rules below:\n" + "\n".join(
            f"{i + 1}. {p}" for i, p in enumerate(items))

    n = _grow(lambda k: build(k) + request, length, count)
    return request, build(n), answer, -1


def _few_shot(w: _Words, length: int, count) -> tuple[str, None, str, int]:
    labels = list(_REVIEWS)
    shots = []
    for _ in range(400):
        label = labels[int(w.rng.integers(2))]
        shots.append(f"Review: {w.fill(w.pick(_REVIEWS[label]))}\nSentiment: {label}")
    label = labels[int(w.rng.integers(2))]
    query = f"Review: {w.fill(w.pick(_REVIEWS[label]))}\nSentiment:"
    head = "Classify the sentiment of each review as positive or negative.\n\n"
    build = lambda n: head + "\n\n".join(shots[:n]) + "\n\n" + query
    return build(_grow(build, length, count)), None, f" {label}", -1


def _problem(w: _Words) -> tuple[str, str]:
    name, obj = w.pick(w.names), w.pick(w.objects)
    a, b, c = (int(w.rng.integers(2, 30)) for _ in range(3))
    question = f"{name} has {a} keys for the {obj}, gets {b} more and gives away {c}. How many keys are left?"
    return question, f"{name} starts with {a}. {a} + {b} = {a + b}. {a + b} - {c} = {a + b - c}. The answer is {a + b - c}."


def _chain_of_thought(w: _Words, length: int, count) -> tuple[str, None, str, int]:
    worked = ["Q: {}\nA: {}".format(*_problem(w)) for _ in range(400)]
    question, answer = _problem(w)
    head = "Solve each problem step by step.\n\n"
    build = lambda n: head + "\n\n".join(worked[:n]) + f"\n\nQ: {question}\nA:"
    return build(_grow(build, length, count)), None, " " + answer, -1


_BUILDERS = {"notes": _notes, "principles": _principles, "few_shot": _few_shot, "chain_of_thought": _chain_of_thought}


def generate_prompt(seed: int, index: int, split: str = "train", min_tokens: int = 100, max_tokens: int = 1500,
                    count: Callable[[str], int] = _approx_tokens, kind: str | None = None) -> GeneratedPrompt:
    """Prompt `index` of the split's sequence for `seed`: its kind cycles through KINDS (unless `kind` is
    given) and its length is drawn log-uniformly in [min_tokens, max_tokens] of `count` (user + system text)."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: use one of {SPLITS}")
    rng = np.random.default_rng([seed, SPLITS.index(split), index])
    kind = kind or KINDS[index % len(KINDS)]
    length = int(round(math.exp(rng.uniform(math.log(min_tokens), math.log(max_tokens)))))
    user, system, target, fact = _BUILDERS[kind](_Words(rng, split), length, count)
    return GeneratedPrompt(id=f"{split}-{seed}-{index:04d}", kind=kind, split=split, user=user, system=system,
                           target=target, fact_paragraph=fact)


def generate_prompts(n: int, seed: int = 0, split: str = "train", min_tokens: int = 100, max_tokens: int = 1500,
                     count: Callable[[str], int] = _approx_tokens) -> list[GeneratedPrompt]:
    """The first n prompts of the split for `seed` (generate_prompt for index 0..n-1)."""
    return [generate_prompt(seed, i, split, min_tokens, max_tokens, count) for i in range(n)]


def long_notes_prompt(seed: int, tokens: int, paragraphs: int, split: str = "eval",
                      count: Callable[[str], int] = _approx_tokens) -> GeneratedPrompt:
    """A notes + question prompt of about `tokens` tokens in `paragraphs` paragraphs, one of which holds the
    asked fact (the cost goal's prompt: issue 42, 4,000 tokens of ~34 paragraphs): each paragraph grows a
    sentence at a time, in turn, until the prompt reaches `tokens`; the fact's paragraph is drawn from the seed."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: use one of {SPLITS}")
    rng = np.random.default_rng([seed, SPLITS.index(split), 10_000 + paragraphs])
    w = _Words(rng, split)
    place, obj = w.pick(w.places), w.pick(w.objects)
    code = int(rng.integers(1000, 10000))
    fact = f"The code for the {obj} at {place} is {code}."
    slot = int(rng.integers(paragraphs))
    question = f"\n\nQuestion: what is the code for the {obj} at {place}?"
    paras = [[w.paragraph(1)] for _ in range(paragraphs)]
    paras[slot].append(fact)

    def text() -> str:
        return "\n\n".join(" ".join(p) for p in paras) + question

    k = 0
    while count(text()) < tokens:
        p = paras[k % paragraphs]
        p.insert(len(p) - 1 if k % paragraphs == slot else len(p), w.paragraph(1))
        k += 1
    return GeneratedPrompt(id=f"{split}-{seed}-long-{tokens}-{paragraphs}", kind="notes", split=split, user=text(),
                           system=None, target=f" The code for the {obj} at {place} is {code}.", fact_paragraph=slot)
