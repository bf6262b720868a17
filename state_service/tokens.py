"""Token counting behind one interface.

The default is an estimate (see `EstimateCounter`); an exact tokenizer can be configured
where one is installed (`CAIRN_TOKENIZER`).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol

# One match per estimated token, tuned to GPT-style BPE vocabularies (docs/tokens.md):
# - a run of ASCII letters splits into ceil(L/9) pieces: common words are one token;
#   an apostrophe suffix ('s, 're) or a leading _ or - (snake_case, kebab-case) rides along;
# - digits group by three; a run of other symbols (punctuation, brackets, non-ASCII) splits
#   into pieces of up to three;
# - each newline, and each run of two or more spaces or of tabs, is a token; a single space
#   merges into the next word.
# No match spans a newline, so counts of pieces split at newlines add up (`additive`).
_PIECES = re.compile(
    r"'[A-Za-z]{1,9}|[_-]?[A-Za-z]{1,9}|\d{1,3}|[^\sA-Za-z\d']{1,3}|'|\n| {2,}|\t+"
)


class TokenCounter(Protocol):
    """Counts tokens of text; `name` identifies the counter in stored counts.

    `additive` says that the count of a concatenation equals the sum of the counts of its
    pieces when they are split at a newline, so pieces may be counted (and cached) apart.
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

    name = "estimate-v2"
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


class ExactCounter:
    """Counts with a real tokenizer's `encode`."""

    additive = False

    def __init__(self, name: str, encode: Callable[[str], Sequence[int]]) -> None:
        self.name = name
        self._encode = encode

    def count(self, text: str) -> int:
        """Tokens in `text`."""
        return len(self._encode(text)) if text else 0


def make_counter(spec: str) -> TokenCounter:
    """The counter named by `spec`:

    - `estimate` (default): `EstimateCounter`, no vocabulary needed;
    - `bpe-openai:<encoding>`: OpenAI's encodings (`o200k_base`, `cl100k_base`) from the
      `bpe-openai` package, which carries them (`pip install 'cairn[exact-tokens]'`);
    - `tiktoken:<encoding>`: tiktoken, with its encoding file already in its cache;
    - `hf:<path to tokenizer.json>`: a Hugging Face `tokenizers` file.
    """
    kind, _, arg = spec.partition(":")
    if spec in ("", "estimate"):
        return EstimateCounter()
    try:
        if kind == "bpe-openai" and arg:
            import bpe_openai

            encoding = bpe_openai.get_encoding(arg)
            return ExactCounter(spec, encoding.encode)
        if kind == "tiktoken" and arg:
            import tiktoken

            tk = tiktoken.get_encoding(arg)
            return ExactCounter(spec, lambda text: tk.encode(text, disallowed_special=()))
        if kind == "hf" and arg:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(arg)
            return ExactCounter(
                spec, lambda text: tokenizer.encode(text, add_special_tokens=False).ids
            )
    except ImportError as error:
        raise ValueError(
            f"tokenizer {spec!r} needs a package that is not installed: {error}"
        ) from None
    except Exception as error:
        raise ValueError(f"tokenizer {spec!r} could not be loaded: {error}") from None
    raise ValueError(
        f"unknown tokenizer {spec!r}; use 'estimate', 'bpe-openai:<encoding>', "
        "'tiktoken:<encoding>' or 'hf:<path to tokenizer.json>'"
    )
