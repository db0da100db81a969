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


def compile_pattern(text: str, *, timeout: float = DEFAULT_REGEX_TIMEOUT,
                    on_timeout: Optional[Callable[[str, str], None]] = None):
    """Return a pattern object with ``.text``, ``.kind`` and ``.matches(key) -> bool``."""
    if text.startswith(REGEX_MARKER):
        return RegexPattern(text, timeout, on_timeout)
    return PrefixPattern(text)
