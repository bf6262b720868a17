"""Token counting behind one interface.

The default is an estimate (see `EstimateCounter`); an exact tokenizer can be configured
where one is installed (`CAIRN_TOKENIZER`).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Protocol

# One match per estimated token. A run of L ASCII letters splits into ceil(L/6) matches:
# common English words are one token, long or rare ones split. Digits group by three,
# every other non-space character (punctuation, non-ASCII) is a token, as is each newline
# and each run of two or more spaces. A single space merges into the next word, as in
# GPT-style BPE vocabularies. No match spans a newline or a symbol, so the count of a
# concatenation is the sum of the counts of pieces split there (`additive`).
_PIECES = re.compile(r"[A-Za-z]{1,6}|\d{1,3}|[^\sA-Za-z\d]|\n| {2,}|\t+")


class TokenCounter(Protocol):
    """Counts tokens of text; `name` identifies the counter in stored counts.

    `additive` says that the count of a concatenation equals the sum of the counts of its
    pieces when they are split at a newline or a symbol, so pieces may be counted (and
    cached) apart.
    """

    name: str
    additive: bool

    def count(self, text: str) -> int:
        """Tokens in `text`."""


class EstimateCounter:
    """An estimate of GPT-style BPE token counts without a vocabulary (see `_PIECES`).

    All counting happens inside one regular-expression scan, so it costs microseconds per
    kilobyte; `docs/tokens.md` gives its measured error.
    """

    name = "estimate-v1"
    additive = True

    def count(self, text: str) -> int:
        """Estimated tokens in `text`."""
        return len(_PIECES.findall(text))


class CachedCounts:
    """Token counts of recently seen texts, bounded by their total length.

    Shared blocks render identically for every agent they are attached to, so a fan-out
    counts each block once instead of once per agent.
    """

    def __init__(self, counter: TokenCounter, max_chars: int = 32_000_000) -> None:
        self.counter = counter
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._chars = 0
        self._max_chars = max_chars
        self._lock = threading.Lock()

    def count(self, text: str) -> int:
        """Tokens in `text`, from the cache when seen recently."""
        with self._lock:
            cached = self._counts.get(text)
            if cached is not None:
                self._counts.move_to_end(text)
                return cached
        tokens = self.counter.count(text)
        if len(text) * 4 > self._max_chars:
            return tokens
        with self._lock:
            if text not in self._counts:
                self._counts[text] = tokens
                self._chars += len(text)
                while self._chars > self._max_chars:
                    old, _ = self._counts.popitem(last=False)
                    self._chars -= len(old)
        return tokens


# Chat formats wrap each message in a few tokens of role and separators (OpenAI's guidance
# counts 3 per message plus 1 for the reply's priming; 4 covers role and separators).
MESSAGE_OVERHEAD = 4


def message_tokens(
    counter: TokenCounter, content: str, name: str, calls: list[tuple[str, str]]
) -> int:
    """Tokens one chat message costs: overhead, content, name and each call's name and
    arguments."""
    total = MESSAGE_OVERHEAD + counter.count(content)
    if name:
        total += counter.count(name) + 1
    for call_name, arguments in calls:
        total += MESSAGE_OVERHEAD + counter.count(call_name) + counter.count(arguments)
    return total


def make_counter(spec: str) -> TokenCounter:
    """Builds the counter named by `spec` ('estimate', or 'tiktoken:<encoding>')."""
    if spec in ("", "estimate"):
        return EstimateCounter()
    raise ValueError(f"unknown tokenizer {spec!r}; use 'estimate'")
