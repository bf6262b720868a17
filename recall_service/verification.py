"""VerifyStream: recompute everything from the stored records and say where it first breaks.

`verify_log` is a pure function over what the store holds: the records in seq order, the
interior Merkle nodes, the signed checkpoints and the stream's recorded head. It checks, in
this order of evidence:

1. every record: seq gap-free, content against content_hash (unless erased), the leaf hash
   against the canonical bytes of all fields, the chain hash against its predecessor;
2. every erased record has a REDACTION record that erased it;
3. the stream's recorded size, chain head and root against the records;
4. every stored Merkle node against the leaves it covers;
5. every stored checkpoint's root and chain head against the records at its size, the
   latest checkpoint covering the whole log, and the latest signature (when it fails, every
   signature, to find the first forged one);
6. a checkpoint the client kept: the log must still extend it.

Every failure names the first seq it implicates; the verdict reports the earliest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from cairn_server.auth import Principal
from cairn_server.errors import InvalidArgument
from recall_service import merkle
from recall_service.canonical import canonical_of, chain_next, content_hash, leaf_hash
from recall_service.core import Deps
from recall_service.merkle import Coord
from recall_service.models import Checkpoint, Record, RecordKind, Stream
from recall_service.reads import readable
from recall_service.store.base import LogReader


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome: ok, or the first bad seq and why; `size`, `head` and `root` describe the
    records that verified."""

    ok: bool
    size: int
    head: bytes
    root: bytes
    first_bad_seq: int = 0
    reason: str = ""
    checkpoints_checked: int = 0


def _record_problem(record: Record, expected: int, previous: bytes) -> tuple[str, bytes]:
    """What is wrong with one record (empty when nothing), and its recomputed leaf."""
    if record.seq != expected:
        if record.seq > expected:
            return f"record {expected} is missing (the next stored record is {record.seq})", b""
        return f"record {record.seq} is stored out of order (expected {expected})", b""
    at = f"record {expected}: "
    if (record.content is None) != (record.salt is None):
        return at + "content and salt must be present or erased together", b""
    if (
        record.content is not None
        and record.salt is not None
        and content_hash(record.salt, record.content) != record.content_hash
    ):
        return at + "its content does not match its content_hash", b""
    leaf = leaf_hash(canonical_of(record))
    if leaf != record.leaf_hash:
        return (
            at + "its leaf_hash does not match its fields (kind, author, writer, tags, "
            "metadata, time, idempotency key or content hash changed)",
            leaf,
        )
    if chain_next(previous, leaf) != record.chain_hash:
        return at + "its chain_hash does not follow from the previous record's", leaf
    return "", leaf


def _levels(leaves: list[bytes]) -> list[list[bytes]]:
    """Every complete perfect subtree over the leaves, level by level."""
    levels = [leaves]
    while len(levels[-1]) >= 2:
        below = levels[-1]
        levels.append(
            [merkle.hash_children(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)]
        )
    return levels


def verify_log(
    stream: Stream,
    records: Iterable[Record],
    nodes: Iterable[tuple[Coord, bytes]],
    checkpoints: Sequence[Checkpoint],
    signature_ok: Callable[[Checkpoint], bool],
    trusted: Checkpoint | None = None,
) -> Verdict:
    """Checks a stream's stored log; see the module docstring for what and in which order."""
    failures: list[tuple[int, str]] = []
    sizes = {cp.size for cp in checkpoints} | ({trusted.size} if trusted else set())
    heads = {0: stream.genesis}
    chain = stream.genesis
    leaves: list[bytes] = []
    erased: list[int] = []
    redacted: set[int] = set()
    stopped = False
    for record in records:
        problem, leaf = _record_problem(record, len(leaves) + 1, chain)
        if problem:
            failures.append((min(record.seq, len(leaves) + 1), problem))
            stopped = True
            break
        chain = record.chain_hash
        leaves.append(leaf)
        if record.content is None:
            erased.append(record.seq)
        if record.kind is RecordKind.REDACTION:
            redacted.add(record.target_seq)
        if record.seq in sizes:
            heads[record.seq] = chain
    n = len(leaves)
    levels = _levels(leaves)

    def node(level: int, index: int) -> bytes:
        return levels[level][index]

    root = merkle.root(node, n)
    for seq in erased:
        if seq not in redacted:
            failures.append(
                (seq, f"record {seq} has no content, but no REDACTION record erased it")
            )
    if not stopped:
        if stream.size > n:
            failures.append(
                (
                    n + 1,
                    f"the stream records {stream.size} records but only {n} are stored: "
                    f"records {n + 1}-{stream.size} are missing",
                )
            )
        elif stream.size < n:
            failures.append(
                (
                    stream.size + 1,
                    f"record {stream.size + 1} is stored beyond the stream's "
                    f"recorded size {stream.size}",
                )
            )
        elif (
            stream.head != chain
            or stream.root != root
            or list(stream.frontier) != [node(*c) for c in merkle.peak_coords(n)]
        ):
            failures.append(
                (
                    max(n, 1),
                    "the stream's recorded chain head, root or Merkle frontier does not match "
                    "its records",
                )
            )
    failures.extend(_node_failures(nodes, levels, n, stopped))
    checked = _checkpoint_failures(checkpoints, heads, node, n, stopped, signature_ok, failures)
    if trusted is not None:
        failures.extend(_trusted_failures(trusted, heads, node, n))
    if failures:
        first, reason = min(failures, key=lambda failure: failure[0])
        return Verdict(False, n, chain, root, first, reason, checked)
    return Verdict(True, n, chain, root, checkpoints_checked=checked)


def _node_failures(
    nodes: Iterable[tuple[Coord, bytes]], levels: list[list[bytes]], n: int, stopped: bool
) -> list[tuple[int, str]]:
    failures: list[tuple[int, str]] = []
    seen: set[Coord] = set()
    for (level, index), digest in nodes:
        first, last = index << level, ((index + 1) << level)
        if level < len(levels) and index < len(levels[level]):
            seen.add((level, index))
            if levels[level][index] != digest:
                failures.append(
                    (
                        first + 1,
                        f"the Merkle node over records {first + 1}-{last} does not match them",
                    )
                )
        elif not stopped:
            failures.append(
                (
                    min(first + 1, n + 1),
                    f"a Merkle node covers records {first + 1}-{last}, beyond the {n} stored",
                )
            )
    for level in range(1, len(levels)):
        for index in range(len(levels[level])):
            if (level, index) not in seen:
                first = index << level
                failures.append(
                    (
                        first + 1,
                        f"the Merkle node over records {first + 1}-"
                        f"{(index + 1) << level} is missing",
                    )
                )
    return failures


def _checkpoint_failures(
    checkpoints: Sequence[Checkpoint],
    heads: dict[int, bytes],
    node: merkle.NodeSource,
    n: int,
    stopped: bool,
    signature_ok: Callable[[Checkpoint], bool],
    failures: list[tuple[int, str]],
) -> int:
    checked = 0
    good = 0
    for cp in checkpoints:
        if cp.size > n:
            if not stopped:
                failures.append(
                    (
                        n + 1,
                        f"a signed checkpoint covers {cp.size} records but only {n} are "
                        f"stored: records {n + 1}-{cp.size} are missing",
                    )
                )
            break
        checked += 1
        if cp.head != heads[cp.size] or cp.root != merkle.root(node, cp.size):
            failures.append(
                (
                    good + 1,
                    f"the signed checkpoint at size {cp.size} does not match the "
                    f"records: history in records {good + 1}-{cp.size} was changed",
                )
            )
            break
        good = cp.size
    if not checkpoints:
        failures.append((1, "the stream has no signed checkpoint"))
        return checked
    latest = checkpoints[-1]
    if not stopped and latest.size < n:
        failures.append(
            (
                latest.size + 1,
                f"records {latest.size + 1}-{n} are not covered by any signed checkpoint",
            )
        )
    if not signature_ok(latest):
        previous = 0
        for cp in checkpoints:
            if not signature_ok(cp):
                failures.append(
                    (
                        previous + 1,
                        f"the checkpoint at size {cp.size} has an invalid signature: "
                        f"records {previous + 1}-{cp.size} are not what this server signed",
                    )
                )
                break
            previous = cp.size
    return checked


def _trusted_failures(
    trusted: Checkpoint, heads: dict[int, bytes], node: merkle.NodeSource, n: int
) -> list[tuple[int, str]]:
    if trusted.size > n:
        return [
            (
                n + 1,
                f"the log has {n} verifiable records but the checkpoint you kept covers "
                f"{trusted.size}: records {n + 1}-{trusted.size} were removed",
            )
        ]
    if heads[trusted.size] != trusted.head or merkle.root(node, trusted.size) != trusted.root:
        return [
            (
                1,
                f"the log no longer matches the checkpoint you kept at size {trusted.size}: "
                f"history up to record {trusted.size} was rewritten and re-signed",
            )
        ]
    return []


def verify_stream(
    deps: Deps, principal: Principal, stream_id: str, trusted: Checkpoint | None
) -> Verdict:
    """Verifies a stream the caller may read, optionally against a checkpoint it kept.

    Everything is read in one snapshot, so appends committing meanwhile (on this replica or
    another) are either wholly in what is checked or wholly out of it.
    """
    with deps.store.snapshot() as snapshot:
        reader, stream = readable(deps, principal, stream_id, snapshot)
        return _verify(deps, reader, stream, trusted)


def _verify(deps: Deps, reader: LogReader, stream: Stream, trusted: Checkpoint | None) -> Verdict:
    if trusted is not None:
        if trusted.stream_id != stream.id or trusted.tenant != stream.tenant:
            raise InvalidArgument(
                "trusted_checkpoint",
                f"is for stream '{trusted.stream_id}' of tenant '{trusted.tenant}', not "
                f"'{stream.id}'",
            )
        if not deps.signer.verify(trusted):
            raise InvalidArgument(
                "trusted_checkpoint", "its signature does not verify under this server's key"
            )
    checkpoints = list(reader.iter_checkpoints(stream))
    return verify_log(
        stream,
        reader.iter_records(stream),
        reader.iter_nodes(stream),
        checkpoints,
        deps.signer.verify,
        trusted,
    )
