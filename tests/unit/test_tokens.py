"""Token counting: the estimate's rules, its additivity, the cache and exact tokenizers."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from state_service.tokens import CachedCounts, EstimateCounter, make_counter, message_tokens

ESTIMATE = EstimateCounter()


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("hello", 1),
        ("Hello world", 2),
        ("internationalization", 3),
        ("don't", 2),
        ("core_memory_append", 3),
        ("2026", 2),
        ('{"a":1}', 5),
        ("line\n\nnext", 4),
        ("a    b", 3),
        ("日本語", 1),
    ],
)
def test_estimate_rules(text: str, tokens: int) -> None:
    assert ESTIMATE.count(text) == tokens


@given(st.lists(st.text(max_size=40), max_size=8))
def test_estimate_adds_up_over_pieces_split_at_newlines(pieces: list[str]) -> None:
    parts = [piece + "\n" for piece in pieces]
    assert ESTIMATE.count("".join(parts)) == sum(ESTIMATE.count(p) for p in parts)


def test_cached_counts_agree_with_the_counter() -> None:
    counts = CachedCounts(ESTIMATE, max_chars=100)
    assert counts.count("alpha beta") == ESTIMATE.count("alpha beta")
    assert counts.count("alpha beta") == 2
    assert counts.count("x" * 200) == ESTIMATE.count("x" * 200)


def test_message_tokens_count_overhead_content_and_calls() -> None:
    assert message_tokens(ESTIMATE, "hi there", "", []) == 4 + 2
    assert message_tokens(ESTIMATE, "", "bob", [("lookup", '{"q":"x"}')]) == 4 + 2 + 4 + 1 + 5


def test_openai_encodings_count_exactly() -> None:
    counter = make_counter("bpe-openai:o200k_base")
    assert counter.name == "bpe-openai:o200k_base"
    assert counter.additive is False
    assert counter.count("Hello world, this is a test of the tokenizer!") == 11


def test_hugging_face_tokenizer_file_counts_exactly() -> None:
    import wordllama

    path = Path(wordllama.__file__).parent / "tokenizers" / "l2_supercat_tokenizer_config.json"
    counter = make_counter(f"hf:{path}")
    assert counter.count("Hello world, this is a test.") == 8


def test_unknown_tokenizer_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown tokenizer 'gpt'"):
        make_counter("gpt")
    with pytest.raises(ValueError, match="could not be loaded"):
        make_counter("hf:/nonexistent/tokenizer.json")
