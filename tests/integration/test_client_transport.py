"""cairn.Client and cairn.AsyncClient against a scripted gRPC server started by the test:
retries of idempotent calls only, deadlines, typed errors for every code, API key, TLS."""

from __future__ import annotations

import datetime
import ipaddress
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from google.protobuf import any_pb2
from google.protobuf.message import Message as ProtoMessage
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

import cairn
from cairn.v1 import recall_pb2, recall_pb2_grpc, state_pb2, state_pb2_grpc

FAST = cairn.RetryPolicy(initial_backoff=0.01, max_backoff=0.02)
Outcome = grpc.StatusCode | ProtoMessage | grpc.Status


class Script:
    """Answers calls with the next outcome (the last one repeats): a code to fail with, a
    rich status to fail with, or a reply. Records every call with its metadata."""

    def __init__(self, outcomes: list[Outcome], delay: float) -> None:
        self.outcomes = outcomes
        self.delay = delay
        self.calls: list[tuple[str, Any, dict[str, str]]] = []

    def answer(self, name: str, request: Any, context: grpc.ServicerContext) -> Any:
        self.calls.append((name, request, dict(context.invocation_metadata())))  # type: ignore[arg-type]
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        time.sleep(self.delay)
        if isinstance(outcome, grpc.StatusCode):
            context.abort(outcome, f"scripted {outcome.name}")
        if isinstance(outcome, grpc.Status):
            context.abort_with_status(outcome)
        return outcome

    @property
    def requests(self) -> list[Any]:
        return [request for _, request, _ in self.calls]


def scripted(base: type, service: Any, script: Script) -> Any:
    """A servicer whose every RPC answers from the script."""
    methods = {
        m.name: lambda self, request, context, _name=m.name: script.answer(_name, request, context)
        for m in service.methods
    }
    return type(f"Scripted{base.__name__}", (base,), methods)()


Start = Callable[..., tuple[str, Script]]


@pytest.fixture
def server() -> Iterator[Start]:
    """Starts scripted servers (both services on one port); stopped when the test ends."""
    servers: list[grpc.Server] = []

    def start(
        *outcomes: Outcome, delay: float = 0.0, credentials: grpc.ServerCredentials | None = None
    ) -> tuple[str, Script]:
        script = Script(list(outcomes), delay)
        server = grpc.server(ThreadPoolExecutor(max_workers=4))
        recall_pb2_grpc.add_RecallServiceServicer_to_server(
            scripted(
                recall_pb2_grpc.RecallServiceServicer,
                recall_pb2.DESCRIPTOR.services_by_name["RecallService"],
                script,
            ),
            server,
        )
        state_pb2_grpc.add_StateServiceServicer_to_server(
            scripted(
                state_pb2_grpc.StateServiceServicer,
                state_pb2.DESCRIPTOR.services_by_name["StateService"],
                script,
            ),
            server,
        )
        if credentials is None:
            port = server.add_insecure_port("127.0.0.1:0")
        else:
            port = server.add_secure_port("127.0.0.1:0", credentials)
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}", script

    yield start
    for s in servers:
        s.stop(None)


def client(address: str, **kwargs: Any) -> cairn.Client:
    kwargs.setdefault("retry", FAST)
    return cairn.Client(address, address, api_key="ck_test", **kwargs)


def stream_reply(stream_id: str = "s1") -> recall_pb2.GetStreamResponse:
    return recall_pb2.GetStreamResponse(
        stream=recall_pb2.Stream(id=stream_id, kind=recall_pb2.STREAM_KIND_CONVERSATION, size=3)
    )


def write_reply(seq: int = 1) -> recall_pb2.WriteResponse:
    return recall_pb2.WriteResponse(record=recall_pb2.Record(stream_id="s1", seq=seq))


UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


# --- retries --------------------------------------------------------------------------------


def test_a_read_is_retried_until_the_server_answers(server: Start) -> None:
    address, script = server(UNAVAILABLE, UNAVAILABLE, stream_reply("s1"))
    with client(address) as c:
        stream = c.recall.get_stream("s1")
    assert (stream.id, stream.kind, stream.size) == ("s1", cairn.StreamKind.CONVERSATION, 3)
    assert [name for name, _, _ in script.calls] == ["GetStream"] * 3
    assert script.requests == [recall_pb2.GetStreamRequest(stream_id="s1")] * 3


def test_a_read_that_keeps_failing_raises_unavailable_after_every_attempt(server: Start) -> None:
    address, script = server(UNAVAILABLE)
    with client(address) as c, pytest.raises(cairn.Unavailable) as caught:
        c.state.get_agent("agent-1")
    assert (caught.value.code, caught.value.details) == (UNAVAILABLE, "scripted UNAVAILABLE")
    assert caught.value.attempts == 4
    assert len(script.calls) == 4


def test_the_attempt_count_follows_the_policy(server: Start) -> None:
    address, script = server(UNAVAILABLE)
    policy = cairn.RetryPolicy(max_attempts=2, initial_backoff=0.01)
    with client(address, retry=policy) as c, pytest.raises(cairn.Unavailable) as caught:
        c.state.compile_context("agent-1")
    assert (caught.value.attempts, len(script.calls)) == (2, 2)


def test_a_write_without_an_idempotency_key_is_sent_once(server: Start) -> None:
    address, script = server(UNAVAILABLE, write_reply())
    with client(address) as c, pytest.raises(cairn.Unavailable) as caught:
        c.recall.write("s1", "hello", source_agent_id="planner")
    assert (caught.value.attempts, len(script.calls)) == (1, 1)


def test_a_write_with_an_idempotency_key_is_retried_with_the_same_key(server: Start) -> None:
    address, script = server(UNAVAILABLE, write_reply(seq=7))
    with client(address) as c:
        written = c.recall.write("s1", "hello", idempotency_key="turn-1", metadata={"n": 1})
    assert (written.record.seq, written.replayed, written.checkpoint) == (7, False, None)
    first, second = script.requests
    assert first == second
    assert (first.entry.idempotency_key, first.entry.metadata_json) == ("turn-1", '{"n":1}')


def test_a_batch_is_retried_only_when_every_entry_has_a_key(server: Start) -> None:
    reply = recall_pb2.WriteBatchResponse(records=[recall_pb2.Record(seq=1)])
    address, script = server(UNAVAILABLE, reply)
    keyed = [
        cairn.WriteEntry("a", idempotency_key="k1"),
        cairn.WriteEntry("b", idempotency_key="k2"),
    ]
    with client(address) as c:
        assert [r.seq for r in c.recall.write_batch("s1", keyed).records] == [1]
    assert len(script.calls) == 2

    address, script = server(UNAVAILABLE, reply)
    half = [cairn.WriteEntry("a", idempotency_key="k1"), cairn.WriteEntry("b")]
    with client(address) as c, pytest.raises(cairn.Unavailable):
        c.recall.write_batch("s1", half)
    assert len(script.calls) == 1


def test_commit_step_is_retried_with_the_same_step_id(server: Start) -> None:
    reply = state_pb2.CommitStepResponse(context_version=3, replayed=True)
    address, script = server(UNAVAILABLE, UNAVAILABLE, reply)
    with client(address) as c:
        step = c.state.commit_step("agent-1", [cairn.Message.user("hi")], base_context_version=2)
    assert (step.context_version, step.replayed) == (3, True)
    step_ids = [request.step_id for request in script.requests]
    assert step_ids == [step.step_id] * 3
    assert step.step_id.startswith("step-")


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.state.update_block("block-1", value="v", expected_version=2),
        lambda c: c.state.update_agent("agent-1", name="n"),
        lambda c: c.state.create_agent("a"),
        lambda c: c.state.execute_memory_tool("agent-1", "memory_rethink", {}),
        lambda c: c.state.apply_compaction("agent-1", "plan-1", "summary"),
        lambda c: c.recall.detach("s1", "coder"),
        lambda c: c.recall.redact("s1", 2),
        lambda c: c.recall.create_stream(cairn.StreamKind.CONVERSATION, stream_id="s1"),
    ],
)
def test_writes_without_a_key_are_never_sent_twice(server: Start, call: Any) -> None:
    address, script = server(UNAVAILABLE)
    with client(address) as c, pytest.raises(cairn.Unavailable):
        call(c)
    assert len(script.calls) == 1


def test_an_answer_is_not_retried(server: Start) -> None:
    address, script = server(grpc.StatusCode.NOT_FOUND)
    with client(address) as c, pytest.raises(cairn.NotFound) as caught:
        c.state.get_block("block-9")
    assert (caught.value.details, caught.value.attempts, len(script.calls)) == (
        "scripted NOT_FOUND",
        1,
        1,
    )


def test_a_list_retries_the_page_that_failed_and_goes_on(server: Start) -> None:
    first = recall_pb2.ListStreamsResponse(
        streams=[recall_pb2.Stream(id="a"), recall_pb2.Stream(id="b")], next_page_token="t2"
    )
    last = recall_pb2.ListStreamsResponse(streams=[recall_pb2.Stream(id="c")])
    address, script = server(first, UNAVAILABLE, last)
    with client(address) as c:
        ids = [s.id for s in c.recall.list_streams(page_size=2)]
    assert ids == ["a", "b", "c"]
    assert [(r.page_token, r.page_size) for r in script.requests] == [("", 2), ("t2", 2), ("t2", 2)]


def test_the_api_key_and_user_agent_go_with_every_attempt(server: Start) -> None:
    address, script = server(UNAVAILABLE, stream_reply())
    with client(address) as c:
        c.recall.get_stream("s1")
    for _, _, metadata in script.calls:
        assert metadata["authorization"] == "Bearer ck_test"
        assert metadata["user-agent"].startswith("cairn-python/0.1 ")


def test_without_a_key_no_authorization_is_sent(server: Start) -> None:
    address, script = server(stream_reply())
    with cairn.Client(recall=address) as c:
        c.recall.get_stream("s1")
    assert "authorization" not in script.calls[0][2]


def test_a_service_without_an_address_says_so(server: Start) -> None:
    address, _ = server(stream_reply())
    with cairn.Client(state=address) as c, pytest.raises(RuntimeError) as caught:
        c.recall.get_stream("s1")
    assert str(caught.value) == (
        "this client has no recall address: pass recall='host:port' to create it"
    )


# --- deadlines ------------------------------------------------------------------------------


def test_a_slow_server_raises_deadline_exceeded_within_the_deadline(server: Start) -> None:
    address, script = server(stream_reply(), delay=2.0)
    with client(address, timeout=0.3) as c:
        started = time.monotonic()
        with pytest.raises(cairn.DeadlineExceeded) as caught:
            c.recall.get_stream("s1")
        elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 1.2
    assert (caught.value.code, caught.value.attempts) == (grpc.StatusCode.DEADLINE_EXCEEDED, 1)
    assert len(script.calls) == 1


def test_a_per_call_timeout_overrides_the_client_default(server: Start) -> None:
    address, _ = server(stream_reply(), delay=2.0)
    with client(address, timeout=60) as c:
        started = time.monotonic()
        with pytest.raises(cairn.DeadlineExceeded):
            c.recall.get_stream("s1", timeout=0.2)
    assert time.monotonic() - started < 1.2


def test_retries_end_at_the_deadline(server: Start) -> None:
    address, script = server(UNAVAILABLE)
    policy = cairn.RetryPolicy(max_attempts=1000, initial_backoff=0.05, max_backoff=0.05)
    with client(address, timeout=0.4, retry=policy) as c:
        started = time.monotonic()
        # The last attempt either fails in time (the server's UNAVAILABLE) or is still
        # waiting for its answer when the deadline passes (DEADLINE_EXCEEDED): which one
        # depends on how busy the machine is (seen in a full run on a loaded machine).
        with pytest.raises((cairn.Unavailable, cairn.DeadlineExceeded)) as caught:
            c.recall.get_checkpoint("s1")
        elapsed = time.monotonic() - started
    assert 0.3 < elapsed < 1.2
    assert 1 < caught.value.attempts < 1000
    assert caught.value.attempts - 1 <= len(script.calls) <= caught.value.attempts


# --- typed errors ---------------------------------------------------------------------------

CODES = [
    (grpc.StatusCode.INVALID_ARGUMENT, cairn.InvalidArgument),
    (grpc.StatusCode.NOT_FOUND, cairn.NotFound),
    (grpc.StatusCode.ALREADY_EXISTS, cairn.AlreadyExists),
    (grpc.StatusCode.ABORTED, cairn.Aborted),
    (grpc.StatusCode.FAILED_PRECONDITION, cairn.FailedPrecondition),
    (grpc.StatusCode.PERMISSION_DENIED, cairn.PermissionDenied),
    (grpc.StatusCode.UNAUTHENTICATED, cairn.Unauthenticated),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, cairn.ResourceExhausted),
    (grpc.StatusCode.INTERNAL, cairn.Internal),
    (grpc.StatusCode.UNIMPLEMENTED, cairn.Unimplemented),
    (grpc.StatusCode.DATA_LOSS, cairn.CairnError),
]


@pytest.mark.parametrize(("code", "cls"), CODES)
def test_each_status_code_raises_its_typed_error(
    server: Start, code: grpc.StatusCode, cls: type[cairn.CairnError]
) -> None:
    address, _ = server(code)
    with client(address) as c, pytest.raises(cairn.CairnError) as caught:
        c.state.update_block("block-1", value="v")
    assert type(caught.value) is cls
    assert (caught.value.code, caught.value.details) == (code, f"scripted {code.name}")


def bad_request() -> grpc.Status:
    detail = any_pb2.Any()
    detail.Pack(
        error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field="entry.content", description="must not be empty"
                )
            ]
        )
    )
    status = status_pb2.Status(
        code=code_pb2.INVALID_ARGUMENT,
        message="entry.content: must not be empty",
        details=[detail],
    )
    return rpc_status.to_status(status)


def test_field_violations_come_with_invalid_argument(server: Start) -> None:
    address, _ = server(bad_request())
    with client(address) as c, pytest.raises(cairn.InvalidArgument) as caught:
        c.recall.write("s1", "")
    assert caught.value.details == "entry.content: must not be empty"
    assert caught.value.field_violations == (
        cairn.FieldViolation("entry.content", "must not be empty"),
    )


# --- the asyncio client ---------------------------------------------------------------------


def async_client(address: str, **kwargs: Any) -> cairn.AsyncClient:
    kwargs.setdefault("retry", FAST)
    return cairn.AsyncClient(address, address, api_key="ck_test", **kwargs)


async def test_async_read_is_retried_until_the_server_answers(server: Start) -> None:
    address, script = server(UNAVAILABLE, UNAVAILABLE, stream_reply("s2"))
    async with async_client(address) as c:
        stream = await c.recall.get_stream("s2")
    assert stream.id == "s2"
    assert len(script.calls) == 3
    assert script.calls[0][2]["authorization"] == "Bearer ck_test"


async def test_async_read_that_keeps_failing_raises_after_every_attempt(server: Start) -> None:
    address, script = server(UNAVAILABLE)
    async with async_client(address) as c:
        with pytest.raises(cairn.Unavailable) as caught:
            await c.recall.get_public_key()
    assert (caught.value.attempts, len(script.calls)) == (4, 4)


async def test_async_write_without_a_key_is_sent_once(server: Start) -> None:
    address, script = server(UNAVAILABLE, write_reply())
    async with async_client(address) as c:
        with pytest.raises(cairn.Unavailable):
            await c.recall.write("s1", "hello")
    assert len(script.calls) == 1


async def test_async_slow_server_raises_deadline_exceeded(server: Start) -> None:
    address, _ = server(stream_reply(), delay=2.0)
    async with async_client(address, timeout=0.3) as c:
        started = time.monotonic()
        with pytest.raises(cairn.DeadlineExceeded):
            await c.recall.get_stream("s1")
    assert 0.25 <= time.monotonic() - started < 1.2


async def test_async_list_follows_page_tokens(server: Start) -> None:
    first = state_pb2.ListAgentsResponse(agents=[state_pb2.Agent(id="a1")], next_page_token="t")
    last = state_pb2.ListAgentsResponse(agents=[state_pb2.Agent(id="a2")])
    address, script = server(first, last)
    async with async_client(address) as c:
        ids = [agent.id async for agent in c.state.list_agents(page_size=1)]
    assert ids == ["a1", "a2"]
    assert [r.page_token for r in script.requests] == ["", "t"]


async def test_async_field_violations_come_with_invalid_argument(server: Start) -> None:
    address, _ = server(bad_request())
    async with async_client(address) as c:
        with pytest.raises(cairn.InvalidArgument) as caught:
            await c.recall.write("s1", "")
    assert caught.value.field_violations == (
        cairn.FieldViolation("entry.content", "must not be empty"),
    )


# --- TLS ------------------------------------------------------------------------------------


def certificate(
    name: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate for `name` (also valid for 127.0.0.1), self-signed or by `issuer`."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0].subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    signer = issuer[1] if issuer else key
    return builder.sign(signer, hashes.SHA256()), key


def pem(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[bytes, bytes]:
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


@pytest.fixture(scope="module")
def pki() -> dict[str, tuple[bytes, bytes]]:
    ca = certificate("cairn-test-ca")
    return {
        "ca": pem(*ca),
        "server": pem(*certificate("localhost", ca)),
        "client": pem(*certificate("agent-client", ca)),
    }


def test_tls_with_a_private_root_reaches_the_server(
    server: Start, pki: dict[str, tuple[bytes, bytes]]
) -> None:
    cert, key = pki["server"]
    credentials = grpc.ssl_server_credentials([(key, cert)])
    address, script = server(stream_reply("secure"), credentials=credentials)
    with client(address, tls=cairn.TLS(root_certificates=pki["ca"][0])) as c:
        assert c.recall.get_stream("secure").id == "secure"
    assert script.calls[0][2]["authorization"] == "Bearer ck_test"


def test_plaintext_to_a_tls_server_fails_unavailable(
    server: Start, pki: dict[str, tuple[bytes, bytes]]
) -> None:
    cert, key = pki["server"]
    address, script = server(stream_reply(), credentials=grpc.ssl_server_credentials([(key, cert)]))
    with client(address, retry=cairn.RetryPolicy.never()) as c, pytest.raises(cairn.Unavailable):
        c.recall.get_stream("s1")
    assert script.calls == []


def test_mutual_tls_needs_the_client_certificate(
    server: Start, pki: dict[str, tuple[bytes, bytes]]
) -> None:
    cert, key = pki["server"]
    credentials = grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=pki["ca"][0], require_client_auth=True
    )
    address, script = server(stream_reply("mtls"), credentials=credentials)
    client_cert, client_key = pki["client"]
    with_cert = cairn.TLS(
        root_certificates=pki["ca"][0], certificate_chain=client_cert, private_key=client_key
    )
    with client(address, tls=with_cert) as c:
        assert c.recall.get_stream("mtls").id == "mtls"
    without = cairn.TLS(root_certificates=pki["ca"][0])
    with (
        client(address, tls=without, retry=cairn.RetryPolicy.never()) as c,
        pytest.raises(cairn.Unavailable),
    ):
        c.recall.get_stream("mtls")
    assert len(script.calls) == 1


def test_server_name_override_checks_the_name_in_the_certificate(
    server: Start, pki: dict[str, tuple[bytes, bytes]]
) -> None:
    cert, key = pki["server"]
    address, _ = server(
        stream_reply("named"), credentials=grpc.ssl_server_credentials([(key, cert)])
    )
    port = address.rsplit(":", 1)[1]
    tls = cairn.TLS(root_certificates=pki["ca"][0], server_name="localhost")
    with cairn.Client(recall=f"127.0.0.1:{port}", tls=tls) as c:
        assert c.recall.get_stream("named").id == "named"
    wrong = cairn.TLS(root_certificates=pki["ca"][0], server_name="elsewhere.example")
    with (
        cairn.Client(recall=address, tls=wrong, retry=cairn.RetryPolicy.never()) as c,
        pytest.raises(cairn.Unavailable),
    ):
        c.recall.get_stream("named")
