"""The server on the qdrant-client adapter (`--qdrant-url`): qdrant-client's in-process mode
always, and a real Qdrant server when CAIRN_TEST_QDRANT_URL names one (none runs on the
development machine). Writes are found in every mode; a redaction leaves the collection."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable

import pytest

import cairn
from cairn.enums import ParticipantRole, StreamKind
from cairn_server.auth import Role
from tests.servers import ServerProcess, make_key

TARGETS = [":memory:"] + (
    [os.environ["CAIRN_TEST_QDRANT_URL"]] if os.environ.get("CAIRN_TEST_QDRANT_URL") else []
)


@pytest.mark.parametrize("qdrant_url", TARGETS)
def test_the_qdrant_client_adapter_serves_every_mode_and_forgets_a_redaction(
    server_factory: Callable[..., ServerProcess], qdrant_url: str
) -> None:
    collection = f"cairn_test_{uuid.uuid4().hex[:8]}"
    server = server_factory(
        "recall_service", "--qdrant-url", qdrant_url, "--qdrant-collection", collection
    )
    key = make_key(server, "acme", Role.ADMIN)
    with cairn.Client(recall=server.address, api_key=key) as client:
        room = client.recall.create_stream(StreamKind.CONVERSATION).stream.id
        client.recall.attach(room, "ana", ParticipantRole.WRITER)
        client.recall.write(room, "Bees make honey in the orchard.", source_agent_id="ana")
        kite = client.recall.write(room, "The red kite circled the hill.", source_agent_id="ana")
        last = client.recall.write(room, "We picked apples at noon.", source_agent_id="ana")
        wait = {room: last.record.seq}
        for mode in ("vector", "lexical", "hybrid"):
            hits = client.recall.search("red kite", stream_ids=[room], mode=mode, min_seq=wait)
            assert hits[0].record.seq == kite.record.seq, mode
        redaction = client.recall.redact(room, kite.record.seq).record.seq
        after = client.recall.search(
            "red kite", stream_ids=[room], mode="vector", min_seq={room: redaction}
        )
        assert sorted(h.record.seq for h in after) == [kite.record.seq - 1, last.record.seq]
