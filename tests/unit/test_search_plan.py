"""The indexer's plan: whatever batches the log is read in, and whatever is redacted between
them, the indexes end up holding exactly what one pass over the final log would write."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace

import pytest

from recall_service.index_plan import (
    IndexBatch,
    index_key,
    indexed_record,
    plan,
    plan_slice,
    split_key,
)
from recall_service.index_reads import read_slice
from recall_service.models import Record, RecordKind, Role, Stream, StreamKind
from recall_service.projections.documents import TextSettings, indexed_texts

# Two neighbours on each side, no date: small enough to write the expected texts out.
SETTINGS = TextSettings(with_date=False, neighbours_before=2, neighbours_after=2)


def record(seq: int, kind: RecordKind = RecordKind.MESSAGE, **kw: object) -> Record:
    fields: dict[str, object] = {
        "stream_id": "room",
        "seq": seq,
        "kind": kind,
        "source_agent_id": "ana" if seq % 2 else "bo",
        "written_by": "admin:x",
        "subject_agent_id": "",
        "role": Role.NONE,
        "target_seq": 0,
        "content": f"word{seq}",
        "salt": b"s",
        "content_hash": b"h",
        "tags": (),
        "metadata_json": "{}",
        "created_at": 1_000_000 * seq,
        "idempotency_key": "",
        "leaf_hash": b"l",
        "chain_hash": b"c",
    }
    fields.update(kw)
    return Record(**fields)  # type: ignore[arg-type]


class Log:
    """An in-memory stream log with the reads the indexer makes (`LogReader`'s subset)."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.stream = Stream(
            1, "acme", "room", StreamKind.CONVERSATION, "x", 0, b"", 0, b"", b"", 0
        )

    def message(self) -> None:
        self.records.append(record(len(self.records) + 1))

    def event(self) -> None:
        self.records.append(
            record(len(self.records) + 1, RecordKind.ATTACH, content="", subject_agent_id="cy")
        )

    def redact(self, target: int) -> None:
        self.records[target - 1] = replace(self.records[target - 1], content=None, salt=None)
        self.records.append(
            record(len(self.records) + 1, RecordKind.REDACTION, content="", target_seq=target)
        )

    @property
    def size(self) -> int:
        return len(self.records)

    def _with_text(self) -> list[Record]:
        return [r for r in self.records if r.kind is RecordKind.MESSAGE and r.content is not None]

    def records_between(self, stream: Stream, first: int, last: int) -> list[Record]:
        return self.records[first - 1 : last]

    def messages_before(self, stream: Stream, seq: int, limit: int) -> list[Record]:
        return [r for r in self._with_text() if r.seq < seq][-limit:]

    def messages_after(self, stream: Stream, seq: int, last: int, limit: int) -> list[Record]:
        return [r for r in self._with_text() if seq < r.seq <= last][:limit]

    def vectors(self, stream: Stream, first: int, last: int) -> dict[int, bytes]:
        return {}


Indexed = dict[int, tuple[str, str]]  # seq -> (body, context)


def apply(index: Indexed, batch: IndexBatch) -> None:
    for seqs in batch.deletes.values():
        for seq in seqs:
            index.pop(seq, None)
    for i in batch.targets:
        text = batch.texts[i]
        index[batch.window[i].seq] = (text.body, text.context)


def index_in_steps(log: Log, bounds: Sequence[int]) -> Indexed:
    """Indexes the log as the indexer would, a slice ending at each bound in turn."""
    index: Indexed = {}
    done = 0
    for last in bounds:
        if last > done:
            apply(
                index, plan_slice(read_slice(log, log.stream, done + 1, last, SETTINGS), SETTINGS)
            )
            done = last
    return index


def rebuilt(log: Log) -> Indexed:
    return index_in_steps(log, [log.size])


def test_each_message_is_indexed_with_its_two_neighbours_on_each_side() -> None:
    log = Log()
    for _ in range(6):
        log.message()
    index = rebuilt(log)
    assert index[1] == ("ana: word1", "bo: word2\nana: word3")
    assert index[4] == ("bo: word4", "bo: word2\nana: word3\nana: word5\nbo: word6")
    assert sorted(index) == [1, 2, 3, 4, 5, 6]


def test_events_are_not_indexed_and_do_not_count_as_neighbours() -> None:
    log = Log()
    log.message()
    log.event()
    log.message()
    log.event()
    log.message()
    index = rebuilt(log)
    assert sorted(index) == [1, 3, 5]
    assert index[3] == ("ana: word3", "ana: word1\nana: word5")


@pytest.mark.parametrize("step", [1, 2, 3, 5])
def test_any_batching_writes_what_one_pass_writes(step: int) -> None:
    log = Log()
    for i in range(17):
        log.event() if i in (0, 7) else log.message()
    in_steps = index_in_steps(log, list(range(step, log.size + step, step)))
    assert in_steps == rebuilt(log)


def test_a_redaction_removes_the_record_and_its_text_from_every_neighbours_context() -> None:
    log = Log()
    for _ in range(9):
        log.message()
    index = index_in_steps(log, [log.size])
    log.redact(5)
    apply(index, plan_slice(read_slice(log, log.stream, 10, 10, SETTINGS), SETTINGS))
    assert 5 not in index
    assert not [seq for seq, (body, context) in index.items() if "word5" in body + context]
    assert index == rebuilt(log)
    assert index[4] == ("bo: word4", "bo: word2\nana: word3\nbo: word6\nana: word7")


def test_redactions_between_batches_converge_on_a_rebuild_of_the_final_log() -> None:
    for targets in itertools.combinations([1, 3, 4, 8], 2):
        log = Log()
        bounds = []
        for _ in range(8):
            log.message()
        bounds.append(log.size)
        for target in targets:
            log.message()
            log.redact(target)
            bounds.append(log.size)
        index = index_in_steps(log, [3, *bounds])
        assert index == rebuilt(log), targets


def test_a_record_erased_before_it_was_read_is_never_indexed() -> None:
    log = Log()
    for _ in range(4):
        log.message()
    log.redact(3)
    assert sorted(rebuilt(log)) == [1, 2, 4]


def test_markers_move_to_the_slice_end_and_deletes_name_the_erased_seq() -> None:
    log = Log()
    for _ in range(3):
        log.message()
    log.redact(2)
    log.event()
    batch = plan([read_slice(log, log.stream, 1, 5, SETTINGS)], SETTINGS)
    assert batch.marks == {"acme/room": 5}
    assert batch.deletes == {"acme/room": [2]}
    assert [batch.window[i].seq for i in batch.targets] == [1, 3]


@pytest.mark.parametrize(
    "settings",
    [
        TextSettings(),
        TextSettings(neighbours_before=0, neighbours_after=0),
        TextSettings(neighbours_before=4, neighbours_after=1),
    ],
)
def test_batching_and_redactions_converge_whatever_the_text_settings(
    settings: TextSettings,
) -> None:
    log = Log()
    index: Indexed = {}
    done = 0

    def catch_up() -> None:
        nonlocal done
        apply(
            index, plan_slice(read_slice(log, log.stream, done + 1, log.size, settings), settings)
        )
        done = log.size

    for i in range(14):
        log.event() if i == 5 else log.message()
        if i % 4 == 3:
            catch_up()
    log.redact(3)
    log.message()
    catch_up()
    log.redact(12)
    catch_up()
    full: Indexed = {}
    apply(full, plan_slice(read_slice(log, log.stream, 1, log.size, settings), settings))
    assert index == full
    assert 3 not in index and 12 not in index


def test_index_keys_keep_tenants_apart() -> None:
    assert index_key("acme", "room") == "acme/room"
    assert index_key("globex", "room") != index_key("acme", "room")
    assert split_key("acme/a/b") == ("acme", "a/b")


def test_a_record_is_indexed_at_the_time_it_was_said() -> None:
    """`occurred_at`, when the writer gave it, is the record's time in the indexes (the
    date in its context, the time filters, conflict recency); otherwise the log's time."""
    said = record(1, occurred_at=1_683_554_160_654_321, created_at=1_767_225_600_000_000)
    plain = record(2, created_at=1_767_225_601_000_000)
    assert indexed_record("acme", said).created_at == 1_683_554_160.654321
    assert indexed_record("acme", plain).created_at == 1_767_225_601.0
    dated = TextSettings(neighbours_before=0, neighbours_after=0)
    texts = indexed_texts([indexed_record("acme", said), indexed_record("acme", plain)], dated)
    assert [t.context for t in texts] == ["8 May 2023", "1 January 2026"]
