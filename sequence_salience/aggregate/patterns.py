"""User regex patterns for `regex` granularity: the subset common to Python `re` and
JavaScript `RegExp` (check_pattern), compiled with a time limit (compile_pattern)."""

from __future__ import annotations

import re

import regex

from sequence_salience.errors import SalienceError

# Longest time one user pattern may spend matching a text (seconds); a sane pattern takes
# milliseconds on the longest prompt a server accepts.
PATTERN_TIMEOUT_S = 1.0

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


def check_pattern(pattern: str) -> None:
    """Rejects what lies outside the regex subset shared with the browser.

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

    Raises:
      SalienceError: naming the construct, its position and the fix.
    """
    if not pattern:
        raise SalienceError("regex pattern is empty. Fix: give a pattern, e.g. [^,;]+ for clauses.")
    i, n, in_class, class_first, after_quantifier = 0, len(pattern), False, 0, False
    while i < n:
        c = pattern[i]
        quantifier = False
        if c == "\\":
            if i + 1 >= n:
                raise _pattern_error(pattern, i, "trailing backslash", "escape it as \\\\")
            d = pattern[i + 1]
            if d in "dDwWbBsntrfv":
                i += 2
            elif d == "S":
                if in_class:
                    raise _pattern_error(
                        pattern, i, "\\S inside a class", "use a negated class [^...], or (?:.|\\n) for any character"
                    )
                i += 2
            elif d == "x":
                if not (len(pattern[i + 2:i + 4]) == 2 and all(h in _HEX for h in pattern[i + 2:i + 4])):
                    raise _pattern_error(pattern, i, "\\x without two hex digits", "write \\xHH")
                i += 4
            elif d == "u":
                if not (len(pattern[i + 2:i + 6]) == 4 and all(h in _HEX for h in pattern[i + 2:i + 6])):
                    raise _pattern_error(pattern, i, "\\u without four hex digits", "write \\uHHHH")
                i += 6
            elif d in "0123456789":
                raise _pattern_error(
                    pattern, i, f"backreference or octal escape \\{d}", "remove it (use \\xHH for a character)"
                )
            elif d.isascii() and d.isalpha():
                construct, fix = _LETTER_ESCAPES.get(d, (f"escape \\{d}", "remove the backslash or use a class"))
                raise _pattern_error(pattern, i, construct, fix)
            else:
                i += 2  # escaped punctuation or symbol: a literal
        elif in_class:
            if c == "]" and i > class_first:
                in_class = False
            elif c == "[":
                raise _pattern_error(pattern, i, "unescaped [ inside a class", "escape it as \\[")
            i += 1
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                raise _pattern_error(pattern, i, "class starting with ] ([] or [^])", "escape it as \\]")
            in_class, class_first, i = True, j, j
        elif c == "(":
            if pattern.startswith("(?", i):
                nxt = pattern[i + 2:i + 4]
                if nxt[:1] in (":", "=", "!"):
                    i += 3
                elif nxt in ("<=", "<!"):
                    raise _pattern_error(pattern, i, "lookbehind (?<=...) / (?<!...)", "match the context and use a group")
                elif nxt[:1] == "<" or nxt[:1] == "P":
                    raise _pattern_error(pattern, i, "named group", "use a plain group (...)")
                elif nxt[:1] == ">":
                    raise _pattern_error(pattern, i, "atomic group (?>...)", "use a non-capturing group (?:...)")
                elif nxt[:1] == "#":
                    raise _pattern_error(pattern, i, "comment group (?#...)", "remove the comment")
                elif nxt[:1] == "(":
                    raise _pattern_error(pattern, i, "conditional group (?(...)...)", "use alternation a|b")
                else:
                    raise _pattern_error(pattern, i, "inline flags (?...)", "remove the flags; write both cases, e.g. [Tt]he")
            else:
                i += 1
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
        after_quantifier = "greedy" if quantifier else False
    if in_class:
        raise _pattern_error(pattern, n, "unterminated class [", "close it with ]")


def compile_pattern(pattern: str) -> regex.Pattern:
    """Checks `pattern` against the shared subset and compiles it (with the `regex` package).

    Flags are fixed: MULTILINE (`^`/`$` at line boundaries) and ASCII (`\\d`,
    `\\w`, `\\s`, `\\b` in their ASCII meaning, as in JavaScript); `.` matches
    anything but "\\n"; VERSION0 (`re`'s behaviour). See `check_pattern` for the
    subset. Match with `timeout=PATTERN_TIMEOUT_S` (as `segment` does): a user
    pattern may backtrack catastrophically.

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
