"""Subscription patterns: a prefix (ZeroMQ semantics) or, with a leading ``~``, a regular expression.

* ``""`` matches every key; ``"eu."`` matches ``"eu.fr"``.
* ``"~^(eu|us)\\."`` is the regex ``^(eu|us)\\.`` of the ``regex`` module, *searched* in the key
  (anchor it yourself). Every match runs under a timeout, so a hostile pattern cannot stall the
  broker: a match that times out counts as no match (and is reported through ``on_timeout``).
"""
from __future__ import annotations

from typing import Callable, Optional

import regex

REGEX_MARKER = "~"
DEFAULT_REGEX_TIMEOUT = 0.005  # seconds per match


class PatternError(ValueError):
    """A pattern that cannot be used; the text is fit for INVALID."""


class PrefixPattern:
    __slots__ = ("text", "prefix")
    kind = "prefix"

    def __init__(self, text: str):
        self.text = text
        self.prefix = text

    def matches(self, key: str) -> bool:
        return key.startswith(self.prefix)

    def __repr__(self) -> str:
        return f"PrefixPattern({self.text!r})"


class RegexPattern:
    __slots__ = ("text", "compiled", "timeout", "on_timeout")
    kind = "regex"

    def __init__(self, text: str, timeout: float = DEFAULT_REGEX_TIMEOUT,
                 on_timeout: Optional[Callable[[str, str], None]] = None):
        self.text = text
        self.timeout = timeout
        self.on_timeout = on_timeout
        try:
            self.compiled = regex.compile(text[len(REGEX_MARKER):])
        except regex.error as exc:
            raise PatternError(f"bad regular expression {text[1:]!r}: {exc}") from None

    def matches(self, key: str) -> bool:
        try:
            return self.compiled.search(key, timeout=self.timeout) is not None
        except TimeoutError:
            if self.on_timeout is not None:
                self.on_timeout(self.text, key)
            return False

    def __repr__(self) -> str:
        return f"RegexPattern({self.text!r})"


def backtracking_risk(expression: str) -> Optional[str]:
    """Why ``expression`` may backtrack catastrophically, or None when it looks linear.

    A conservative static check on the parsed pattern (Python's own regex parser; the ``regex``
    module's syntax is a superset, and what it cannot parse is left to the timeout): an unbounded
    repetition may not contain another repetition (``(a+)+``, ``(\\w+\\s?)*``) nor an alternation
    whose branches can start alike or be empty (``(a|a)+``, ``(a|ab)*``). Alternations of distinct
    literal starts (``(eu|us)+``) and bounded repetitions stay allowed."""
    try:
        from re import _parser as sre_parse          # type: ignore[attr-defined]
        from re._constants import BRANCH, MAX_REPEAT, MAXREPEAT, MIN_REPEAT, LITERAL  # type: ignore
    except ImportError:                               # pragma: no cover (Python < 3.11)
        import sre_constants as _c
        import sre_parse                               # type: ignore[no-redef]
        BRANCH, MAX_REPEAT, MAXREPEAT, MIN_REPEAT, LITERAL = (
            _c.BRANCH, _c.MAX_REPEAT, _c.MAXREPEAT, _c.MIN_REPEAT, _c.LITERAL)
    try:
        parsed = sre_parse.parse(expression)
    except Exception:
        return None
    repeats = (MAX_REPEAT, MIN_REPEAT)

    def children(op, av):
        if op in repeats:
            return [av[2]]
        if op == BRANCH:
            return list(av[1])
        if isinstance(av, tuple) and av and isinstance(av[-1], (list, sre_parse.SubPattern)):
            return [av[-1]]
        return []

    def risky_inside(items) -> Optional[str]:
        for op, av in items:
            if op in repeats and av[1] > 1:
                return "a repetition inside a repetition"
            if op == BRANCH:
                starts = []
                for alt in av[1]:
                    alt = list(alt)
                    if not alt or alt[0][0] != LITERAL:
                        return "an alternation with an empty or non-literal branch inside a repetition"
                    starts.append(alt[0][1])
                if len(set(starts)) != len(starts):
                    return "an alternation whose branches start alike inside a repetition"
            for child in children(op, av):
                why = risky_inside(child)
                if why:
                    return why
        return None

    def walk(items) -> Optional[str]:
        for op, av in items:
            if op in repeats and av[1] == MAXREPEAT:
                why = risky_inside(av[2])
                if why:
                    return why
            for child in children(op, av):
                why = walk(child)
                if why:
                    return why
        return None

    return walk(parsed)


def compile_pattern(text: str, *, timeout: float = DEFAULT_REGEX_TIMEOUT,
                    on_timeout: Optional[Callable[[str, str], None]] = None,
                    check_backtracking: bool = False):
    """Return a pattern object with ``.text``, ``.kind`` and ``.matches(key) -> bool``.

    With ``check_backtracking`` (the broker's setting), a regex that may backtrack
    catastrophically (:func:`backtracking_risk`) is refused with :class:`PatternError`."""
    if text.startswith(REGEX_MARKER):
        pattern = RegexPattern(text, timeout, on_timeout)
        if check_backtracking:
            why = backtracking_risk(text[len(REGEX_MARKER):])
            if why:
                raise PatternError(f"regular expression {text[1:]!r} may backtrack "
                                   f"catastrophically ({why}); rewrite it without nesting")
        return pattern
    return PrefixPattern(text)
