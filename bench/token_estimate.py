"""How far the default token estimate is from real tokenizers, on real text.

    python -m bench.token_estimate [--dataset ../shared/data/locomo-dev.json]

Texts: every LoCoMo dialogue turn (real conversational English), compiled memory sections
built from those turns (Letta's block format, standard and line-numbered), and the memory
tools' JSON schemas. References: OpenAI's o200k_base and cl100k_base encodings (from the
`bpe-openai` package, offline). Prints one JSON object: per text kind and encoding, the ratio
of estimated to true totals, the mean and 95th-percentile absolute error per text, and the
share of texts underestimated by more than 10%.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from state_service.compile import compile_memory
from state_service.memory_tools import MEMORY_TOOLS
from state_service.models import Block, MemoryMode
from state_service.tokens import EstimateCounter, make_counter

DEFAULT_DATASET = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo-dev.json"


def dialogue_turns(dataset: Path) -> list[str]:
    """Every turn's text, in order."""
    turns: list[str] = []
    for conversation in json.loads(dataset.read_text()):
        for key, value in conversation["conversation"].items():
            if key.startswith("session_") and isinstance(value, list):
                turns += [turn["text"] for turn in value]
    return turns


def memory_sections(turns: list[str]) -> list[str]:
    """Compiled memory made of consecutive turns, five per block, three blocks per section."""
    sections = []
    for start in range(0, len(turns) - 15, 15):
        blocks = [
            Block(
                id=str(i),
                tenant="t",
                label=label,
                value="\n".join(turns[start + 5 * i : start + 5 * i + 5]),
                description=f"What I know about {label}.",
            )
            for i, label in enumerate(("human", "persona", "notes"))
        ]
        for mode in (MemoryMode.STANDARD, MemoryMode.LINE_NUMBERED):
            sections.append(compile_memory(blocks, mode, []))
    return sections


def tool_schemas() -> list[str]:
    """Each memory tool as it appears in a `tools` array."""
    return [
        json.dumps([{"type": "function", "function": tool}], separators=(",", ":"))
        for tool in MEMORY_TOOLS
    ]


def compare(texts: list[str], encoding: str) -> dict[str, Any]:
    """Estimate vs. one exact encoding over `texts`."""
    exact = make_counter(f"bpe-openai:{encoding}")
    estimate = EstimateCounter()
    truth = [exact.count(t) for t in texts]
    guess = [estimate.count(t) for t in texts]
    errors = sorted((g - t) / t for g, t in zip(guess, truth, strict=True) if t > 0)
    absolute = sorted(abs(e) for e in errors)
    return {
        "texts": len(texts),
        "total_ratio": round(sum(guess) / sum(truth), 3),
        "mean_abs_error": round(statistics.mean(absolute), 3),
        "p95_abs_error": round(absolute[int(0.95 * (len(absolute) - 1))], 3),
        "under_by_10pct_share": round(sum(1 for e in errors if e < -0.1) / len(errors), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    args = parser.parse_args()
    turns = dialogue_turns(args.dataset)
    kinds = {
        "dialogue_turns": turns,
        "memory_sections": memory_sections(turns),
        "tool_schemas": tool_schemas(),
    }
    result = {
        "estimator": EstimateCounter.name,
        **{
            kind: {enc: compare(texts, enc) for enc in ("o200k_base", "cl100k_base")}
            for kind, texts in kinds.items()
        },
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
