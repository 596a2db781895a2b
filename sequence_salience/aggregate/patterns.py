"""User regex patterns for `regex` granularity: the subset common to Python `re` and
JavaScript `RegExp` (check_pattern), bounded in size before anything compiles them
(PATTERN_BOUNDS), compiled with a time limit (compile_pattern)."""

from __future__ import annotations

import dataclasses
import re
import threading

import regex

from sequence_salience.errors import PatternBusy, SalienceError

# Longest wall time one user pattern may spend matching a text (seconds; every match together: `match_spans`); a
# sane pattern takes milliseconds on the longest prompt a server accepts.
PATTERN_TIMEOUT_S = 1.0
# Matchers running at once in the process (`match_spans`). A runaway match cannot be stopped from outside: it ends at
# the `regex` package's own limit, 1 s of the process's CPU time, after its caller was refused; unbounded, a burst of
# N runaway requests burned N threads' CPU at once (issue 43). Two slots: a second request (another client's, or the
# same bomb sent again) is not held up by one runaway; beyond them a pattern waits for a slot (at most
# PATTERN_TIMEOUT_S) or is refused as busy (`PatternBusy`). A sane pattern holds one for milliseconds; two runaways
# at once end sooner (each one's limit counts the other's CPU).
MATCHER_SLOTS = 2


class _Matchers:
    """The matcher threads running now (at most MATCHER_SLOTS)."""

    def __init__(self) -> None:
        self.running = 0
        self.changed = threading.Condition()

    def take(self, timeout_s: float) -> bool:
        """Takes a slot, waiting at most `timeout_s` for one; whether it got one."""
        with self.changed:
            if not self.changed.wait_for(lambda: self.running < MATCHER_SLOTS, timeout_s):
                return False
            self.running += 1
            return True

    def free(self) -> None:
        with self.changed:
            self.running -= 1
            self.changed.notify_all()

    def idle(self, timeout_s: float) -> bool:
        """Waits at most `timeout_s` until no matcher runs; whether none does."""
        with self.changed:
            return self.changed.wait_for(lambda: self.running == 0, timeout_s)


_MATCHERS = _Matchers()


def matchers_idle(timeout_s: float = 0.0) -> bool:
    """Whether no `match_spans` matcher runs (a refused runaway runs on to the `regex` package's own limit), waiting
    at most `timeout_s` for the last to end."""
    return _MATCHERS.idle(timeout_s)


@dataclasses.dataclass(frozen=True)
class PatternBounds:
    """How large a user pattern may be; `check_pattern` refuses a larger one before it is compiled.

    The `regex` package writes counted repeats out when it compiles (`a{99999999}` grew a server to
    9.6 GB; `a{999999}` alone takes 1.2 s and 250 MB), and its parser recurses once per nested group
    (about 400 deep raise RecursionError). Matching is bounded separately, by PATTERN_TIMEOUT_S.

    Attributes:
      max_chars: the pattern's length, in characters (code points).
      max_repeat: each bound of a counted repeat `{m}`, `{m,}`, `{m,n}` (m and n each).
      max_expanded: the pattern's length once every repeat is written out: a repeated piece counts
        its upper bound times (`{n}` and `{m,n}`: n, `{m,}`: m + 1, `{0}` still 1; `*`, `+`, `?`:
        once), nested repeats multiply, quantifier characters count nothing; a conservative estimate
        of what the compiler builds. `(a{1000}){1000}` is 1,002,000.
      max_depth: groups open at once (`(`, `(?:`, `(?=`, `(?!`).

    The server publishes these in /get_info "requestLimits"."pattern" (lit_app/server.py), and the page
    checks the same bounds with the same rule (frontend/src/shared/aggregate/pattern.ts `checkPattern`);
    tests/data/pattern_bounds_cases.json holds the cases both test against.
    """

    max_chars: int = 1_000
    max_repeat: int = 1_000
    max_expanded: int = 10_000
    max_depth: int = 32

    def as_json(self) -> dict[str, int]:
        """The bounds as the browser reads them (`PatternBounds` in pattern.ts)."""
        return dataclasses.asdict(self)


PATTERN_BOUNDS = PatternBounds()

_HEX = frozenset("0123456789abcdefABCDEF")
_QUANTIFIER_BRACE_RE = re.compile(r"\{[0-9]+(?:,[0-9]*)?\}")
_LETTER_ESCAPES = {
    "A": ("string anchor \\A", "use ^ (it matches at every line start)"),
    "Z": ("string anchor \\Z", "use $ (it matches at every line end)"),
    "z": ("string anchor \\z", "use $ (it matches at every line end)"),
    "G": ("anchor \\G", "remove it"),
    "p": ("Unicode property class \\p{...}", "list the characters in a class, e.g. [A-Za-zÀ-ÿ]"),
    "P": ("Unicode property class \\P{...}", "list the characters in a negated class"),
    "k": ("named backreference \\k<...>", "remove the backreference"),
    "N": ("named character \\N{...}", "write the character itself"),
    "U": ("escape \\U", "write the character itself"),
    "c": ("control escape \\c", "use \\xHH"),
}


def _pattern_error(pattern: str, pos: int, construct: str, fix: str) -> SalienceError:
    return SalienceError(
        f"regex pattern {pattern!r}: {construct} at position {pos} is not supported "
        f"(Python re and JavaScript RegExp treat it differently or only one has it). Fix: {fix}."
    )


def _quoted(pattern: str) -> str:
    return repr(pattern) if len(pattern) <= 60 else repr(pattern[:60]) + "…"


def _bound_error(pattern: str, what: str, fix: str) -> SalienceError:
    return SalienceError(f"regex pattern {_quoted(pattern)}: {what}. Fix: {fix}.")


def check_pattern(pattern: str, bounds: PatternBounds | None = PATTERN_BOUNDS) -> None:
    """Rejects what lies outside the regex subset shared with the browser, or beyond `bounds`.

    Supported: literals, `.`, `^`/`$` (at every line start/end), classes
    `[...]`/`[^...]`, `\\d \\D \\w \\W \\s \\S \\b \\B` (ASCII meaning in both
    languages), `\\n \\r \\t \\f \\v \\xHH \\uHHHH`, escaped punctuation,
    groups `(...)`, `(?:...)`, lookahead `(?=...)`/`(?!...)`, alternation,
    quantifiers `* + ? {n} {n,} {n,m}` and their lazy `?` forms. No flags.

    Rejected, with the construct and a fix in the message: lookbehind, named
    groups, inline flags, comments, conditionals, atomic groups, possessive
    quantifiers, backreferences, `\\A \\Z \\z \\G`, `\\p{..}`, `\\N{..}`,
    `\\U`, `\\c`, other letter escapes, `{,n}`, lone `{ } ]`, `[]` / `[^]`,
    an unescaped `[` inside a class, `\\S` inside a class, a trailing `\\`.

    Bounded (`bounds`, PATTERN_BOUNDS unless given; None: unbounded): the length, each repeat count, the
    written-out length and the group depth (see PatternBounds), checked while scanning, so that nothing
    large is built; each refusal names the bound and the fix.

    Raises:
      SalienceError: naming the construct, its position and the fix.
    """
    if not pattern:
        raise SalienceError("regex pattern is empty. Fix: give a pattern, e.g. [^,;]+ for clauses.")
    if bounds is not None and len(pattern) > bounds.max_chars:
        raise _bound_error(pattern, f"it is {len(pattern):,} characters long; at most {bounds.max_chars:,} are"
                                    " allowed", "shorten the pattern")
    # The written-out length (PatternBounds.max_expanded): one [size so far, size of the last piece] per open
    # group (the pattern itself at the bottom); `total` is their sum plus the open groups' openings, never
    # decreasing, so it is refused as soon as it passes the bound.
    frames, total, piece_start = [[0, 0]], 0, 0
    i, n, in_class, class_first, after_quantifier = 0, len(pattern), False, 0, False
    while i < n:
        c = pattern[i]
        quantifier = False
        if not in_class:
            piece_start = i
        if c == "\\":
            i = _escape_end(pattern, i, in_class)
        elif in_class:
            if c == "]" and i > class_first:
                in_class = False
            elif c == "[":
                raise _pattern_error(pattern, i, "unescaped [ inside a class", "escape it as \\[")
            i += 1
        elif c == "[":
            in_class, class_first = True, _class_body_start(pattern, i)
            i = class_first
        elif c == "(":
            i = _group_opening_end(pattern, i)
        elif c in "*+?":
            if c == "+" and after_quantifier == "greedy":
                raise _pattern_error(pattern, i, "possessive quantifier", "drop the trailing +")
            if c == "?" and after_quantifier == "greedy":
                after_quantifier = "lazy"
                i += 1
                continue
            quantifier = True
            i += 1
        elif c == "{":
            m = _QUANTIFIER_BRACE_RE.match(pattern, i)
            if m is None:
                raise _pattern_error(pattern, i, "lone { or {,n} quantifier", "escape it as \\{ or write {0,n}")
            quantifier = True
            i = m.end()
        elif c == "}":
            raise _pattern_error(pattern, i, "lone }", "escape it as \\}")
        elif c == "]":
            raise _pattern_error(pattern, i, "lone ]", "escape it as \\]")
        else:
            i += 1
        if bounds is not None and not in_class:
            total = _grow(pattern, piece_start, i, quantifier, frames, total, bounds)
        after_quantifier = "greedy" if quantifier else False
    if in_class:
        raise _pattern_error(pattern, n, "unterminated class [", "close it with ]")


def _escape_end(pattern: str, i: int, in_class: bool) -> int:
    """Where the escape at pattern[i] (a backslash) ends; raises for one outside the shared subset."""
    if i + 1 >= len(pattern):
        raise _pattern_error(pattern, i, "trailing backslash", "escape it as \\\\")
    d = pattern[i + 1]
    if d in "dDwWbBsntrfv":
        return i + 2
    if d == "S":
        if in_class:
            raise _pattern_error(
                pattern, i, "\\S inside a class", "use a negated class [^...], or (?:.|\\n) for any character"
            )
        return i + 2
    if d == "x":
        if not (len(pattern[i + 2:i + 4]) == 2 and all(h in _HEX for h in pattern[i + 2:i + 4])):
            raise _pattern_error(pattern, i, "\\x without two hex digits", "write \\xHH")
        return i + 4
    if d == "u":
        if not (len(pattern[i + 2:i + 6]) == 4 and all(h in _HEX for h in pattern[i + 2:i + 6])):
            raise _pattern_error(pattern, i, "\\u without four hex digits", "write \\uHHHH")
        return i + 6
    if d in "0123456789":
        raise _pattern_error(
            pattern, i, f"backreference or octal escape \\{d}", "remove it (use \\xHH for a character)"
        )
    if d.isascii() and d.isalpha():
        construct, fix = _LETTER_ESCAPES.get(d, (f"escape \\{d}", "remove the backslash or use a class"))
        raise _pattern_error(pattern, i, construct, fix)
    return i + 2  # escaped punctuation or symbol: a literal


def _class_body_start(pattern: str, i: int) -> int:
    """Where the body of the class opened at pattern[i] (a `[`) starts, after a `^`; raises for `[]` / `[^]`."""
    j = i + 1
    if j < len(pattern) and pattern[j] == "^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        raise _pattern_error(pattern, i, "class starting with ] ([] or [^])", "escape it as \\]")
    return j


def _group_opening_end(pattern: str, i: int) -> int:
    """Where the opening of the group at pattern[i] (a `(`) ends: `(`, `(?:`, `(?=` or `(?!`; raises for the
    other `(?` forms, naming each."""
    if not pattern.startswith("(?", i):
        return i + 1
    nxt = pattern[i + 2:i + 4]
    if nxt[:1] in (":", "=", "!"):
        return i + 3
    if nxt in ("<=", "<!"):
        raise _pattern_error(pattern, i, "lookbehind (?<=...) / (?<!...)", "match the context and use a group")
    if nxt[:1] == "<" or nxt[:1] == "P":
        raise _pattern_error(pattern, i, "named group", "use a plain group (...)")
    if nxt[:1] == ">":
        raise _pattern_error(pattern, i, "atomic group (?>...)", "use a non-capturing group (?:...)")
    if nxt[:1] == "#":
        raise _pattern_error(pattern, i, "comment group (?#...)", "remove the comment")
    if nxt[:1] == "(":
        raise _pattern_error(pattern, i, "conditional group (?(...)...)", "use alternation a|b")
    raise _pattern_error(pattern, i, "inline flags (?...)", "remove the flags; write both cases, e.g. [Tt]he")


def _grow(pattern: str, start: int, end: int, quantifier: bool, frames: list[list[int]], total: int,
          bounds: PatternBounds) -> int:
    """The written-out length after pattern[start:end], one piece of `check_pattern`'s scan (an atom, a
    whole class, a group's opening or closing, `|`, or a quantifier); raises past a bound."""
    text = pattern[start:end]
    top = frames[-1]
    if quantifier:
        if text in ("*", "+", "?"):
            return total
        low, _, high = text[1:-1].partition(",")
        for count in (low, high):
            if len(count.lstrip("0")) > len(str(bounds.max_repeat)) or (count and int(count) > bounds.max_repeat):
                shown = count if len(count) <= 12 else count[:12] + "…"
                raise _bound_error(pattern, f"the repeat count {shown} at position {start} is above"
                                            f" {bounds.max_repeat:,}, the largest allowed (the compiler writes"
                                            " counted repeats out)", f"use a count up to {bounds.max_repeat:,},"
                                            " or + or * for any number")
        times = max(1, int(high) if high else int(low) + 1 if "," in text else int(low))
        grown = top[1] * (times - 1)
        top[0] += grown
        top[1] *= times
        total += grown
    elif text[0] == "(":
        if len(frames) > bounds.max_depth:
            raise _bound_error(pattern, f"groups nest deeper than {bounds.max_depth} at position {start}",
                               "remove parentheses that group nothing")
        frames.append([len(text), 0])
        total += len(text)
    elif text == ")" and len(frames) > 1:
        size = frames.pop()[0] + 1
        frames[-1][0] += size
        frames[-1][1] = size
        total += 1
    elif text == "|":
        top[0] += 1
        top[1] = 0
        total += 1
    else:
        top[0] += len(text)
        top[1] = len(text)
        total += len(text)
    if total > bounds.max_expanded:
        raise _bound_error(pattern, f"written out, its repeats make it longer than {bounds.max_expanded:,}"
                                    f" characters at position {start} (nested repeat counts multiply)",
                           "use smaller counts, or + or * instead")
    return total


def compile_pattern(pattern: str) -> regex.Pattern:
    """Checks `pattern` against the shared subset and compiles it (with the `regex` package).

    Flags are fixed: MULTILINE (`^`/`$` at line boundaries) and ASCII (`\\d`,
    `\\w`, `\\s`, `\\b` in their ASCII meaning, as in JavaScript); `.` matches
    anything but "\\n"; VERSION0 (`re`'s behaviour). See `check_pattern` for the
    subset. Match with `match_spans` (as `segment` does): a user pattern may
    backtrack catastrophically.

    Raises:
      SalienceError: a construct outside the subset, or invalid syntax.
    """
    check_pattern(pattern)
    try:
        return regex.compile(pattern, regex.MULTILINE | regex.ASCII | regex.VERSION0)
    except regex.error as e:
        raise SalienceError(
            f"regex pattern {pattern!r} is invalid: {e.msg} at position {e.pos}. Fix the pattern syntax."
        ) from e


def match_spans(pattern: str, text: str, timeout_s: float = PATTERN_TIMEOUT_S) -> list[tuple[int, int]]:
    """(start, end) of every non-empty match of the user `pattern` (compile_pattern) in `text`, found within
    `timeout_s` seconds of wall time for all of them together.

    The `regex` package's own `timeout` is no wall-time bound: it counts the process's CPU time (C `clock()`,
    every thread's) from the start of a `finditer`, across all its matches. At load ~11 on 2 cores its 1 s
    ran 3.5 s (the matching thread got a fraction of a core; docs/benchmarks.md "Session 37 (h2)"), and
    a model pass on other threads cuts it short. So the matching runs on a thread of its own and the caller
    waits for it at most `timeout_s`; one still running then is refused, and ends on its own at the package's
    limit (`timeout_s` of the process's CPU time), its matches dropped. At most MATCHER_SLOTS such threads run at
    once: the caller first waits up to `timeout_s` for a free one (a refused runaway keeps its slot until it
    ends), else the pattern is not tried (was: one thread per request, so a burst of runaway patterns burned
    one thread's CPU each at once; docs/benchmarks.md "Session 38 (h2)").

    Raises:
      PatternBusy: no matcher was free within `timeout_s` (another pattern's match still runs); send it again.
      SalienceError: the pattern is outside the subset or invalid (compile_pattern), or matching took longer.
    """
    compiled = compile_pattern(pattern)
    if not _MATCHERS.take(timeout_s):
        raise PatternBusy(
            f"regex pattern {_quoted(pattern)} was not tried: other patterns' matches are still running out their"
            f" {timeout_s:g} s limit (the server matches {MATCHER_SLOTS} patterns at a time). Fix: send the request"
            " again in a second."
        )
    spans: list[tuple[int, int]] = []
    failure: list[Exception] = []
    done = threading.Event()

    def run() -> None:
        try:
            for m in compiled.finditer(text, concurrent=True, timeout=timeout_s):
                if m.end() > m.start():
                    spans.append((m.start(), m.end()))
        except Exception as e:  # pylint: disable=broad-except  # TimeoutError; anything else is raised to the caller
            failure.append(e)
        finally:
            _MATCHERS.free()
            done.set()

    try:
        threading.Thread(target=run, name="pattern-match", daemon=True).start()
    except BaseException:
        _MATCHERS.free()
        raise
    if not done.wait(timeout_s) or (failure and isinstance(failure[0], TimeoutError)):
        raise SalienceError(
            f"regex pattern {pattern!r} took over {timeout_s:g} s on {len(text):,} characters"
            " (catastrophic backtracking). Fix: simplify the pattern: no nested quantifiers like (a+)+"
            " and no alternatives that match the same text like (a|a)+."
        )
    if failure:
        raise failure[0]
    return spans
