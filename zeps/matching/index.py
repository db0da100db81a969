"""Subscription index: which subscribers want a message with this key?

Prefix subscriptions live in a character trie (pygtrie). ``match(key)`` walks the trie once along
the key (``trie.prefixes``), so its cost grows with the key's length and the number of hits, not
with the number of prefix subscriptions. Regex subscriptions cannot share such a structure: each
*distinct* regex is run once per key (identical regexes share one run), under its timeout.

Routing keys repeat a lot in real streams, so results are memoised per key in a bounded cache that
any subscription change clears.
"""
from __future__ import annotations

from typing import Dict, FrozenSet, Hashable, Set

import pygtrie

from .patterns import PrefixPattern, RegexPattern

CACHE_LIMIT = 4096


class SubscriptionIndex:
    """Maps patterns to subscriber ids (any hashable value); ``match(key)`` gives the ids."""

    def __init__(self) -> None:
        self._trie = pygtrie.CharTrie()
        self._regex: Dict[str, tuple] = {}   # pattern text -> (RegexPattern, set of ids)
        self._cache: Dict[str, FrozenSet[Hashable]] = {}
        self._count = 0
        self._narrow = 0         # entries that do not match every key (not the empty prefix)

    def __len__(self) -> int:
        return self._count

    def add(self, sub_id: Hashable, pattern) -> None:
        if isinstance(pattern, RegexPattern):
            entry = self._regex.setdefault(pattern.text, (pattern, set()))
            ids = entry[1]
        else:
            ids = self._trie.setdefault(pattern.prefix, set())
        if sub_id not in ids:
            ids.add(sub_id)
            self._count += 1
            if isinstance(pattern, RegexPattern) or pattern.prefix:
                self._narrow += 1
        self._cache.clear()

    def remove(self, sub_id: Hashable, pattern) -> None:
        if isinstance(pattern, RegexPattern):
            entry = self._regex.get(pattern.text)
            if entry and sub_id in entry[1]:
                entry[1].discard(sub_id)
                self._count -= 1
                self._narrow -= 1
                if not entry[1]:
                    del self._regex[pattern.text]
        else:
            ids = self._trie.get(pattern.prefix)
            if ids and sub_id in ids:
                ids.discard(sub_id)
                self._count -= 1
                if pattern.prefix:
                    self._narrow -= 1
                if not ids:
                    del self._trie[pattern.prefix]
        self._cache.clear()

    def has_regex(self, text: str) -> bool:
        return text in self._regex

    def regex_count(self) -> int:
        """Distinct regexes: each is run once per published key not in the cache."""
        return len(self._regex)

    def selective(self) -> bool:
        """Is there any pattern that does not match every key (a non-empty prefix, a regex)?
        If not, every subscriber takes every message and no key needs to be looked at."""
        return self._narrow > 0

    def everyone(self) -> FrozenSet[Hashable]:
        """Subscribers with the empty prefix: they take every key."""
        return frozenset(self._trie.get("", ()))

    def match(self, key: str) -> FrozenSet[Hashable]:
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        found: Set[Hashable] = set()
        for _prefix, ids in self._trie.prefixes(key):
            found |= ids
        for pattern, ids in self._regex.values():
            if not ids <= found and pattern.matches(key):
                found |= ids
        result = frozenset(found)
        if len(self._cache) >= CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = result
        return result


__all__ = ["SubscriptionIndex", "PrefixPattern", "RegexPattern"]
