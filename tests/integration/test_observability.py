"""Metrics and traces of a running state service."""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent import futures
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import field_mask_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from cairn.v1 import recall_pb2, state_pb2
from tests.clients import block, recall_client, rpc_error, state_client
from tests.servers import free_port, make_key


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Samples of the /metrics page, keyed by name and label set."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def rpc(method: str, code: str) -> frozenset[tuple[str, str]]:
    return frozenset({("service", "state"), ("method", method), ("code", code)})


NONE: frozenset[tuple[str, str]] = frozenset()


def test_metrics_count_rpcs_by_method_and_code_and_the_compile_cache(server_factory: Any) -> None:
    port = free_port()
    proc = server_factory("state_service", "--metrics-port", str(port))
    with grpc.insecure_channel(proc.address) as channel:
        client = state_client(channel, make_key(proc, "acme"))
        human = client.CreateBlock(state_pb2.CreateBlockRequest(block=block("human", "x"))).block
        agents = [
            client.CreateAgent(
                state_pb2.CreateAgentRequest(name=f"a{i}", block_ids=[human.id])
            ).agent
            for i in range(3)
        ]
        for _ in range(4):
            client.CompileContext(state_pb2.CompileContextRequest(agent_id=agents[0].id))
        client.CompileContext(
            state_pb2.CompileContextRequest(agent_id=agents[1].id, force_recompile=True)
        )
        client.UpdateBlock(
            state_pb2.UpdateBlockRequest(
                block=state_pb2.Block(id=human.id, value="y"),
                update_mask=field_mask_pb2.FieldMask(paths=["value"]),
            )
        )
        rpc_error(client.GetAgent, state_pb2.GetAgentRequest(agent_id="agent-missing"))
    samples = scrape(port)
    assert samples["cairn_rpc_requests_total", rpc("CreateAgent", "OK")] == 3
    assert samples["cairn_rpc_requests_total", rpc("CompileContext", "OK")] == 5
    assert samples["cairn_rpc_requests_total", rpc("GetAgent", "NOT_FOUND")] == 1
    assert samples["cairn_rpc_latency_seconds_count", rpc("UpdateBlock", "OK")] == 1
    assert samples["cairn_compile_cache_total", frozenset({("result", "hit")})] == 4
    assert samples["cairn_compile_cache_total", frozenset({("result", "miss")})] == 1
    # 3 agents created, 1 forced recompile, 3 rebuilt by the block update.
    assert samples["cairn_prompt_rebuilds_total", NONE] == 7
    assert samples["cairn_prompt_rebuild_fanout_count", NONE] == 1
    assert samples["cairn_prompt_rebuild_fanout_sum", NONE] == 3
    labels = [value for _, pairs in samples for _, value in pairs]
    assert not any(re.search(r"agent-|block-|ck_", value) for value in labels)


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP trace receiver that keeps every span's name."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.received = threading.Event()

    def Export(self, request: Any, context: Any) -> Any:
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                self.names += [span.name for span in scope.spans]
        self.received.set()
        return trace_service_pb2.ExportTraceServiceResponse()


def test_traces_reach_an_otlp_endpoint_with_rpc_store_and_compile_spans(
    server_factory: Any,
) -> None:
    collector = Collector()
    receiver = grpc.server(futures.ThreadPoolExecutor(2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, receiver)  # type: ignore[no-untyped-call]
    otlp_port = receiver.add_insecure_port("127.0.0.1:0")
    receiver.start()
    try:
        proc = server_factory("state_service", "--otlp-endpoint", f"http://127.0.0.1:{otlp_port}")
        with grpc.insecure_channel(proc.address) as channel:
            client = state_client(channel, make_key(proc, "acme"))
            agent = client.CreateAgent(state_pb2.CreateAgentRequest(name="traced")).agent
            client.CompileContext(state_pb2.CompileContextRequest(agent_id=agent.id))
        assert proc.stop() == 0
        deadline = time.monotonic() + 15
        while "compile.prompt" not in collector.names and time.monotonic() < deadline:
            collector.received.wait(0.5)
    finally:
        receiver.stop(None)
    assert "/cairn.v1.StateService/CreateAgent" in collector.names
    assert "/cairn.v1.StateService/CompileContext" in collector.names
    assert "store.write" in collector.names
    assert "store.read" in collector.names
    assert "compile.prompt" in collector.names


def test_logs_are_json_with_request_id_and_principal_and_never_keys_or_content(
    server_factory: Any,
) -> None:
    proc = server_factory("state_service", "--log-level", "debug")
    key = make_key(proc, "acme")
    secret = "SECRET-CONTENT-4711"
    with grpc.insecure_channel(proc.address) as channel:
        client = state_client(channel, key)
        agent = client.CreateAgent(
            state_pb2.CreateAgentRequest(name="logged", memory_blocks=[block("human", secret)])
        ).agent
        client.CompileContext(
            state_pb2.CompileContextRequest(agent_id=agent.id),
            metadata=[("authorization", f"Bearer {key}"), ("x-request-id", "req-42")],
        )
        rpc_error(client.GetAgent, state_pb2.GetAgentRequest(agent_id="agent-missing"))
    assert proc.stop() == 0
    lines = [json.loads(line) for line in proc.log().splitlines() if line.startswith("{")]
    calls = [line for line in lines if line["msg"] in ("rpc", "rpc refused")]
    assert [(c["method"], c["code"]) for c in calls] == [
        ("CreateAgent", "OK"),
        ("CompileContext", "OK"),
        ("GetAgent", "NOT_FOUND"),
    ]
    assert calls[1]["request_id"] == "req-42"
    assert {c["principal"] for c in calls} == {
        "admin 'key-" + key.split("_")[1] + "' of tenant 'acme'"
    }
    text = proc.log()
    assert secret not in text
    assert key not in text
    assert key.split("_", 2)[2] not in text  # the secret (it may hold "_" itself)


@pytest.mark.parametrize("flags", [(), ("--access-log",)])
def test_the_access_log_is_its_own_switch(server_factory: Any, flags: tuple[str, ...]) -> None:
    """At the default level (info) a server logs no RPC; `--access-log` adds one line per
    RPC that succeeded, and nothing else that debug would show."""
    proc = server_factory("state_service", *flags)
    key = make_key(proc, "acme")
    with grpc.insecure_channel(proc.address) as channel:
        state_client(channel, key).CreateAgent(state_pb2.CreateAgentRequest(name="quiet"))
    assert proc.stop() == 0
    lines = [json.loads(line) for line in proc.log().splitlines() if line.startswith("{")]
    calls = [(line["method"], line["code"]) for line in lines if line["msg"] == "rpc"]
    assert calls == ([("CreateAgent", "OK")] if flags else [])
    assert [line for line in lines if line["level"] == "debug" and line["msg"] != "rpc"] == []


@pytest.mark.parametrize(
    ("flags", "loop"), [((), "uvloop"), (("--event-loop", "asyncio"), "asyncio")]
)
def test_the_server_says_which_event_loop_it_runs_on(
    server_factory: Any, flags: tuple[str, ...], loop: str
) -> None:
    """uvloop unless told otherwise; either loop serves calls."""
    proc = server_factory("recall_service", *flags)
    key = make_key(proc, "acme")
    with grpc.insecure_channel(proc.address) as channel:
        created = recall_client(channel, key).CreateStream(
            recall_pb2.CreateStreamRequest(kind=recall_pb2.STREAM_KIND_CONVERSATION)
        )
    assert created.stream.size == 0
    assert proc.stop() == 0
    lines = [json.loads(line) for line in proc.log().splitlines() if line.startswith("{")]
    assert [line["event_loop"] for line in lines if line["msg"] == "serving"] == [loop]
