"""What a record contributes to the search indexes.

`IndexedRecord` is the input the indexer feeds both lanes. `indexed_texts` decides, as a pure
function of the records of one stream and explicit `TextSettings`, the text each record is
indexed under: its own normalised content (the *body*), optionally prefixed by its author, and
optionally a *context* made of the session date and neighbouring turns of the same stream.
Nothing here knows about any particular dataset.
"""

from __future__ import annotations

import hashlib
import re
import time
import unicodedata
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from cairn_server.errors import InvalidArgument

# One fixed namespace so that point ids are stable across processes, machines and versions.
# A stream key scoped to a tenant is `tenant/stream_id` (the service's index keys; a tenant
# name has no "/").
KEY_SEPARATOR = "/"
_POINT_NAMESPACE = uuid.UUID("6f1d3c2a-7a8e-4b6f-9a51-2c0e5b8d4e10")
_MARKER_NAMESPACE = uuid.UUID("0b7f6a49-3d2c-4e1a-8f57-9d6c1e2a4b30")

_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})
_CURLY = "\u2018\u2019\u201c\u201d"
_WORD = re.compile(r"[^\W_]+")
# What `_WORD` matches in ASCII text (lowercased), two characters or more.
_ASCII_WORD = re.compile(r"[a-z0-9]{2,}")

# A general-purpose English stop-word list (127 function words, after NLTK's): words
# that carry no subject. Tantivy's built-in list (Lucene's 33 words) leaves question words
# such as "what", "did", "how" to dilute long queries.
_STOPWORD_TEXT = """i me my myself we our ours ourselves you your yours yourself yourselves he
    him his himself she her hers herself it its itself they them their theirs themselves what which
    who whom this that these those am is are was were be been being have has had having do
    does did doing a an the and but if or because as until while of at by for with about
    against between into through during before after above below to from up down in out on
    off over under again further then once here there when where why how all any both each
    few more most other some such no nor not only own same so than too very s t can will
    just don should now"""
ENGLISH_STOPWORDS: tuple[str, ...] = tuple(_STOPWORD_TEXT.split())
_STOP_SET = frozenset(ENGLISH_STOPWORDS)


@dataclass(frozen=True, slots=True)
class IndexedRecord:
    """One log record as the projections see it.

    `author` is the record's `source_agent_id`; `created_at` is epoch seconds (UTC);
    `vector` is a client-supplied embedding, when the stream uses client vectors.
    """

    tenant: str
    stream_id: str
    seq: int
    author: str
    created_at: float
    text: str
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, str] | None = None
    vector: tuple[float, ...] | None = None


def tenant_scoped(tenant: str, stream_keys: Sequence[str]) -> bool:
    """True when every key is `tenant/...` (the service's index keys) for a tenant without
    "/". Every index refuses a record whose key has a "/" unless it is scoped to the record's
    own tenant (`check_keys`), so a filter on such keys admits the tenant's records only: a
    tenant condition adds nothing to it."""
    prefix = f"{tenant}{KEY_SEPARATOR}"
    return KEY_SEPARATOR not in tenant and all(k.startswith(prefix) for k in stream_keys)


def check_keys(records: Sequence[IndexedRecord]) -> None:
    """Refuses a record whose stream key is scoped to another tenant than its own."""
    for record in records:
        if KEY_SEPARATOR in record.stream_id and not tenant_scoped(
            record.tenant, [record.stream_id]
        ):
            raise InvalidArgument(
                "stream_id",
                f"{record.stream_id!r} is a tenant-scoped key of another tenant than "
                f"{record.tenant!r}",
            )


@dataclass(frozen=True, slots=True)
class TextSettings:
    """What goes into a record's indexed text. Every option is off-able and measured.

    - `with_author`: prefix the body with `"<author>: "`, so a question naming a person
      matches what that person said.
    - `with_date`: add the record's UTC date (`"8 May 2023"`) to the context.
    - `neighbours_before` / `neighbours_after`: how many adjacent records of the same stream
      (by seq) join the context, each cut to `neighbour_max_chars` characters.

    The defaults are the best setting on LoCoMo's dev set (docs/search.md).
    """

    with_author: bool = True
    with_date: bool = True
    neighbours_before: int = 3
    neighbours_after: int = 2
    neighbour_max_chars: int = 400


@dataclass(frozen=True, slots=True)
class IndexedText:
    """The text one record is indexed under: its own body and the surrounding context.

    `neighbours` are the positions, in the list given to `indexed_texts`, of the records
    whose bodies make up the context, and `date` is the date text in it: an embedder that
    pools token embeddings can then build the context's vector from the bodies' (see
    `embedders.embed_indexed`) instead of embedding the context again.
    """

    body: str
    context: str = ""
    neighbours: tuple[int, ...] = ()
    date: str = ""

    def joined(self) -> str:
        """Body and context as one text (for lanes with a single field)."""
        return f"{self.body}\n{self.context}" if self.context else self.body


def normalise(text: str) -> str:
    """Canonical text: NFKC, straight quotes, no control characters, single spaces."""
    text = unicodedata.normalize("NFKC", text)
    if any(quote in text for quote in _CURLY):
        text = text.translate(_QUOTES)
    if not text.isprintable():  # most texts are: skip the per-character pass
        text = "".join(ch if ch.isprintable() else " " for ch in text)
    return " ".join(text.split())  # str.split() splits on what `\s+` matches, 4x faster


def format_date(epoch_seconds: float) -> str:
    """`"8 May 2023"` for an epoch time, in UTC."""
    t = time.gmtime(epoch_seconds)
    return f"{t.tm_mday} {time.strftime('%B', t)} {t.tm_year}"


def body_text(record: IndexedRecord, settings: TextSettings) -> str:
    """A record's own text, normalised, with its author when the settings ask for it."""
    text = normalise(record.text)
    if settings.with_author and record.author:
        return f"{normalise(record.author)}: {text}"
    return text


def indexed_texts(records: Sequence[IndexedRecord], settings: TextSettings) -> list[IndexedText]:
    """The indexed text of each record, in input order.

    Neighbours are taken among `records` themselves: the records of the same stream whose seqs
    are the nearest below (up to `neighbours_before`) and above (up to `neighbours_after`).
    The caller passes a window wide enough to hold them (the indexer reads that many extra
    records around a batch).
    """
    by_stream: dict[str, list[int]] = {}
    for index, record in enumerate(records):
        by_stream.setdefault(record.stream_id, []).append(index)
    position: dict[int, int] = {}
    for members in by_stream.values():
        members.sort(key=lambda index: records[index].seq)
        for i, index in enumerate(members):
            position[index] = i
    bodies = [body_text(record, settings) for record in records]
    out = []
    for index, record in enumerate(records):
        ordered = by_stream[record.stream_id]
        i = position[index]
        neighbours = (
            *ordered[max(0, i - settings.neighbours_before) : i],
            *ordered[i + 1 : i + 1 + settings.neighbours_after],
        )
        date = format_date(record.created_at) if settings.with_date else ""
        parts = [date] if date else []
        parts.extend(bodies[n][: settings.neighbour_max_chars] for n in neighbours)
        out.append(
            IndexedText(
                body=bodies[index], context="\n".join(parts), neighbours=neighbours, date=date
            )
        )
    return out


def point_id(stream_id: str, seq: int) -> str:
    """The stable id (a UUID string) of a record's entry in any index."""
    return str(uuid.uuid5(_POINT_NAMESPACE, f"{stream_id}\x00{seq}"))


_SEQ_BITS = 64
_SEQ_MASK = (1 << _SEQ_BITS) - 1


@lru_cache(maxsize=65536)  # a batch hashes each of its streams for every record
def stream_hash(stream_id: str) -> int:
    """64 bits naming a stream key in `keyed_point_id` (BLAKE2b; two keys that share them
    are told apart by the points' payloads)."""
    return int.from_bytes(hashlib.blake2b(stream_id.encode(), digest_size=8).digest(), "big")


def keyed_point_id(stream_id: str, seq: int) -> str:
    """A record's point id that holds its key: `stream_hash` in the first 64 bits, the seq
    in the last 64, as a UUID string. A search can name its hits by their ids alone
    (`split_keyed_id`), without reading their payloads."""
    return str(uuid.UUID(int=(stream_hash(stream_id) << _SEQ_BITS) | seq))


def split_keyed_id(point: uuid.UUID | int | str) -> tuple[int, int] | None:
    """The stream hash and the seq a `keyed_point_id` holds (as an index returns it); None
    for a `point_id`, whose last 64 bits start with the UUID variant's 1 (a seq is below
    2**63)."""
    if isinstance(point, uuid.UUID):
        value = point.int
    elif isinstance(point, int):
        value = point
    else:
        value = uuid.UUID(point).int
    seq = value & _SEQ_MASK
    return None if seq >> (_SEQ_BITS - 1) else (value >> _SEQ_BITS, seq)


def marker_id(stream_id: str) -> str:
    """The stable id of the entry holding a stream's last applied seq."""
    return str(uuid.uuid5(_MARKER_NAMESPACE, stream_id))


class RecordKey(NamedTuple):
    """A record's identity across the indexes (a named tuple: searches hash thousands of
    them, and a tuple hashes in C)."""

    stream_id: str
    seq: int


def content_terms(text: str) -> frozenset[str]:
    """The lowercase words of `text` that carry subject: no stop words, no single letters."""
    lowered = normalise(text).lower()
    if lowered.isascii():  # the same words, found by a simpler pattern in a third less time
        return frozenset(_ASCII_WORD.findall(lowered)) - _STOP_SET
    words = set(_WORD.findall(lowered))
    words -= _STOP_SET
    return frozenset(w for w in words if len(w) > 1)


def reindexed_seqs(first_seq: int, last_seq: int, settings: TextSettings) -> range:
    """The seqs to (re)index when records `first_seq..last_seq` of a stream arrive.

    With `neighbours_after` > 0 the last few records already indexed gain new neighbours, so
    they are indexed again (an overwrite: ids are stable).
    """
    return range(max(1, first_seq - settings.neighbours_after), last_seq + 1)


def read_seqs(first_seq: int, last_seq: int, settings: TextSettings) -> range:
    """The seqs the indexer reads from the log to build the texts of `reindexed_seqs`."""
    start = max(1, first_seq - settings.neighbours_after - settings.neighbours_before)
    return range(start, last_seq + 1)


def contexts_containing(seq: int, settings: TextSettings) -> range:
    """The seqs whose context holds record `seq`: after a redaction of `seq`, they are
    re-indexed (from the redacted log) so that the erased words leave their contexts too."""
    return range(max(1, seq - settings.neighbours_after), seq + settings.neighbours_before + 1)
