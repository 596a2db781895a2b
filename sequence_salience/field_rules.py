"""The rule of every number a user sets (steps, samples, ablations, lengths, tolerances), declared once.

A rule is one field seen from every edge, with one name, type, range, default and help line:

* the config attribute it sets: `name` (SalienceConfig, AblationConfig, FaithfulnessConfig and
  GenerationConfig take their defaults from here);
* the CLI flag `cli_flag` (--<name with dashes>, unless `flag` says otherwise):
  sequence_salience/cli/parser.py `add_flag` reads its type, default, help and range; argparse
  refuses a value out of range, naming the flag and the range;
* the LIT input field `name`: lit_app/schema/fields.py builds its LIT spec (`default`, `min_val`,
  `max_val`), lit_app/schema/inputs.py parses it and lit_app/edge/limits.py checks it at the HTTP edge (where a
  server flag --max_<name> may lower `hi`) with `parse`; the browser reads a counted method's `hi`
  as `max_count` in the published method registry (lit_app/schema/method_registry.py).

A counted method's rule is declared in the method's own module, as its registry record's `count`
(methods/base.py): IG's steps, SmoothGrad's samples, the surrogate's ablations; every edge derives its
flag, spec, limit and payload key from the record (docs/architecture.md, "How to add a method"). `RULES`
lists every rule by name, the methods' counts included (each added when its method is registered).

To add a field that is not a method's: declare its FieldRule here (and add it to RULES); give
the config that holds it `default=<RULE>.default`; add the flag with `cli.parser.add_flag(parser, RULE)`;
in the LIT layer add `fields.integer_spec(RULE)` (or `scalar_spec`) to the model's input spec and read
it with `inputs.rule_field(ex, RULE)`. tests/unit/test_field_rules.py then checks every edge against it.
This module imports nothing of the library, so every layer may read it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any


class FieldError(ValueError):
    """A value its rule refuses; the message is the fix ("use a whole number from 1 to 256")."""


@dataclasses.dataclass(frozen=True)
class FieldRule:
    """One user-set number (see the module docstring).

    Attributes:
      name: the config attribute, the LIT input field and (dashes for underscores) the CLI flag.
      type: int (a whole number) or float.
      default: the value when the field is absent.
      lo, hi: the allowed range, both ends included (`lo` excluded when `lo_open`).
      help: one line: what the number counts or bounds.
      flag: the CLI flag when it is not --<name with dashes>.
      lo_open: `lo` itself is refused (a tolerance must be above 0).
    """

    name: str
    type: type
    default: int | float
    lo: int | float
    hi: int | float
    help: str
    flag: str | None = None
    lo_open: bool = False

    def __post_init__(self):
        if self.type not in (int, float):
            raise TypeError(f"FieldRule {self.name}: type is {self.type!r}; use int or float.")
        if self.parse(self.default) != self.default:
            raise ValueError(f"FieldRule {self.name}: the default {self.default!r} is outside its own range.")

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def allowed(self, hi: int | float | None = None, off: bool = False) -> str:
        """What to use, for a message: "a whole number from 1 to 256" ("from 0 (off)" when `off`)."""
        hi = self.hi if hi is None else hi
        if self.type is int:
            return f"a whole number from {'0 (off)' if off else self.lo} to {hi}"
        return f"a number {'above' if self.lo_open else 'from'} {self.lo:g} {'and at most' if self.lo_open else 'to'} {hi:g}"

    def parse(self, value: Any, hi: int | float | None = None, off: bool = False) -> int | float:
        """`value` (a number, or its text: 3, 3.0, "3"; booleans are not numbers) as the rule's type,
        within [lo, hi]; `hi` lowers the upper end (a server's limit); `off`: 0 is accepted too (a
        counted method switched off). Raises FieldError("<value>; use ...") otherwise."""
        hi = self.hi if hi is None else hi
        number = _number(value)
        fix = f"{value!r}; use {self.allowed(hi, off)}"
        if number is None or (self.type is int and not number.is_integer()):
            raise FieldError(fix)
        if off and number == 0:
            return 0
        if not (self.lo < number if self.lo_open else self.lo <= number) or number > hi:
            raise FieldError(fix)
        return int(number) if self.type is int else number


def _number(value: Any) -> float | None:
    """A finite float for 3, 3.5, "3", " 0.5 "; None for booleans, NaN, infinities and anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


# --------------------------------------------------------------------------- generation and explanation tests
MAX_NEW_TOKENS = FieldRule("max_new_tokens", int, 64, 1, 1024, "longest generated response, in tokens")
CURVE_STEPS = FieldRule("steps", int, 10, 1, 50, "faithfulness curves: points after the start (segments removed or"
                        " inserted in that many steps)")
IG_TOLERANCE = FieldRule("ig_tolerance", float, 0.05, 0.0, 1.0, "largest relative IG completeness error (0.05 = 5 %)",
                         lo_open=True)
# Every rule by name: those declared here, then each method's count (added by methods.register, add_method_rule).
RULES: dict[str, FieldRule] = {r.name: r for r in (MAX_NEW_TOKENS, CURVE_STEPS, IG_TOLERANCE)}
# Rules declared in a method's module, readable here as module attributes (add_method_rule; see __getattr__).
_ALIASES: dict[str, FieldRule] = {}


def add_method_rule(rule: FieldRule, alias: str | None = None, listed: bool = True) -> None:
    """Makes a rule declared in a method's module readable here: in RULES when `listed` (a method's count:
    methods/__init__.py `register` adds it), and as the attribute `alias` of this module (default: its name in
    capitals, so the count "ig_steps" reads as `field_rules.IG_STEPS`). Raises ValueError when another rule
    already has that name or alias."""
    alias = alias or rule.name.upper()
    taken = (RULES.get(rule.name) if listed else None, _ALIASES.get(alias), globals().get(alias))
    if any(other is not None and other is not rule for other in taken):
        raise ValueError(f"A rule named {rule.name!r} (or {alias}) is already declared. Fix: name the method's count "
                         "after the method.")
    if listed:
        RULES[rule.name] = rule
    _ALIASES[alias] = rule


def __getattr__(name: str) -> FieldRule:
    """A method's rule by its alias (add_method_rule): `IG_STEPS`, `SMOOTH_GRAD_SAMPLES`, `SURROGATE_MASKS`, ...
    once the methods are registered (importing sequence_salience.methods registers them)."""
    try:
        return _ALIASES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} (a method's rule is readable here once "
                             "sequence_salience.methods is imported)") from None


# --------------------------------------------------------------------------- lists of methods
def distinct_names(names: Sequence[str]) -> tuple[str, ...]:
    """`names` (the methods of one explanation test, or of --method) as a tuple, each at most once.

    A repeated name would be computed again for every repeat (`leave_one_out` named 500 times ran 500
    times as long, and integrated gradients named n times cost n times its step cap), so it is
    refused rather than dropped: FieldError("'leave_one_out' is named 500 times; name each method once").
    With each name once, a list is no longer than the method registry.
    """
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    repeated = [f"{name!r} is named {n} times" for name, n in counts.items() if n > 1]
    if repeated:
        raise FieldError(f"{', '.join(repeated)}; name each method once")
    return tuple(names)
