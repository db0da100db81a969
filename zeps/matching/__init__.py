"""Subscription matching: prefix (trie) and regular-expression patterns."""
from .index import SubscriptionIndex  # noqa: F401
from .patterns import (DEFAULT_REGEX_TIMEOUT, REGEX_MARKER, PatternError, PrefixPattern,  # noqa: F401
                       RegexPattern, compile_pattern)
