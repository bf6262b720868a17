"""The TypeScript client (clients/typescript) against real state and recall servers.

The module builds the TypeScript package once (`scripts/build.sh`: `npm ci` when its
node_modules are missing or stale, then `tsc`), runs its unit tests (the verifier against the
Python reference's vectors, the wrapper against an in-process server), and runs its smoke
program against a state and a recall server started here, in plaintext and over TLS; then
Python reads what TypeScript wrote. Node 20 or newer must be on PATH: without it these tests
fail, saying so, rather than skip.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cairn import verify
from cairn.v1 import recall_pb2, state_pb2
from cairn_server.auth import Role
from tests.clients import recall_client, state_client
from tests.servers import ServerProcess, free_port, make_key

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "typescript"
MIN_NODE = 20
# The name the test certificate is issued for: clients must ask for it, not for 127.0.0.1.
TLS_NAME = "cairn.test"


def node_binary() -> str:
    """The `node` on PATH, at least version 20; fails the test otherwise."""
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "node is not on PATH: the TypeScript client tests need Node.js 20 or newer "
            "(CI has it; install it from your package manager or nodejs.org)",
            pytrace=False,
        )
    version = subprocess.run(
        [node, "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < MIN_NODE:
        pytest.fail(f"{node} is {version}; the TypeScript client needs Node.js 20 or newer")
    return node


def run(args: list[str], timeout: float, env: dict[str, str] | None = None) -> str:
    """Runs a command in the package directory; fails the test with its output if it fails."""
    result = subprocess.run(
        args,
        check=False,
        cwd=PACKAGE,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    if result.returncode != 0:
        pytest.fail(
            f"{' '.join(args)} exited {result.returncode}\n"
            f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}",
            pytrace=False,
        )
    return result.stdout


@pytest.fixture(scope="module")
def node() -> str:
    """`node`, with the TypeScript package built."""
    binary = node_binary()
    run(["bash", "scripts/build.sh"], timeout=300)
    return binary


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for TLS_NAME only (no IP address) and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TLS_NAME)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(TLS_NAME)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class TlsServerProcess(ServerProcess):
    """A server started with --tls-cert/--tls-key; healthy once a TLS health check passes."""

    def start(self, timeout: float = 30.0) -> TlsServerProcess:
        cert = Path(self.args[self.args.index("--tls-cert") + 1]).read_bytes()
        self.log_path = self.data_dir / f"{self.module}-{self.port}.log"
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", self.module, "--port", str(self.port)),
                *("--data-dir", str(self.data_dir), "--metrics-port", "0", *self.args),
            ],
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
        )
        credentials = grpc.ssl_channel_credentials(root_certificates=cert)
        options = [("grpc.ssl_target_name_override", TLS_NAME)]
        deadline = time.monotonic() + timeout
        with grpc.secure_channel(self.address, credentials, options) as channel:
            stub: Any = health_pb2_grpc.HealthStub(channel)
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.module} exited early:\n{self.log()}")
                try:
                    reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return self
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"{self.module} did not become healthy:\n{self.log()}")
                time.sleep(0.05)


class Servers:
    """A state and a recall server, each with an admin key of tenant `acme`."""

    def __init__(self, base: Path, transport: str) -> None:
        self.transport = transport
        self.env: dict[str, str] = {}
        kind: type[ServerProcess] = ServerProcess
        args: list[str] = []
        if transport == "tls":
            cert, key = self_signed(base)
            kind, args = TlsServerProcess, ["--tls-cert", str(cert), "--tls-key", str(key)]
            self.env = {"CAIRN_TLS_ROOT_CERT": str(cert), "CAIRN_TLS_SERVER_NAME": TLS_NAME}
        self.started: list[ServerProcess] = []
        self.state = self._start(kind("state_service", base / "state", free_port(), args, {}))
        self.recall = self._start(kind("recall_service", base / "recall", free_port(), args, {}))
        self.state_key = make_key(self.state.data_dir, "acme", Role.ADMIN)
        self.recall_key = make_key(self.recall.data_dir, "acme", Role.ADMIN)
        cert_pem = Path(self.env["CAIRN_TLS_ROOT_CERT"]).read_bytes() if self.env else b""
        self._credentials = grpc.ssl_channel_credentials(cert_pem) if cert_pem else None

    def _start(self, server: ServerProcess) -> ServerProcess:
        server.data_dir.mkdir(parents=True)
        self.started.append(server.start())
        return server

    def channel(self, server: ServerProcess) -> grpc.Channel:
        """A Python channel to `server` over the same transport."""
        if self._credentials is None:
            return grpc.insecure_channel(server.address)
        options = [("grpc.ssl_target_name_override", TLS_NAME)]
        return grpc.secure_channel(server.address, self._credentials, options)

    def kill(self) -> None:
        for server in self.started:
            server.kill()


@pytest.fixture(scope="module", params=["plaintext", "tls"])
def servers(
    request: pytest.FixtureRequest, node: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Servers]:
    """Both servers, in plaintext and then over TLS."""
    started = Servers(tmp_path_factory.mktemp(f"ts-{request.param}"), request.param)
    try:
        yield started
    finally:
        started.kill()


def test_typescript_unit_tests_pass(node: str) -> None:
    """The verifier against the Python reference's vectors, the client against an in-process
    server, the TLS rule: `node --test` exits 0 only when every test passes."""
    output = run([node, "--test", "dist/test/"], timeout=120)
    counts = dict(re.findall(r"^# (tests|pass|fail) (\d+)$", output, re.MULTILINE))
    assert counts["fail"] == "0"
    assert int(counts["pass"]) == int(counts["tests"]) >= 29


def test_typescript_program_drives_agents_and_a_verified_conversation(
    node: str, servers: Servers
) -> None:
    output = run(
        [node, "dist/smoke/smoke.js"],
        timeout=120,
        env={
            "CAIRN_STATE_ADDRESS": servers.state.address,
            "CAIRN_RECALL_ADDRESS": servers.recall.address,
            "CAIRN_STATE_API_KEY": servers.state_key,
            "CAIRN_RECALL_API_KEY": servers.recall_key,
            **servers.env,
        },
    )
    report: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    assert (report["ok"], report["transport"]) == (True, servers.transport)
    assert report["sharedPrompt"] is True
    assert report["messageSeqs"] == [3, 4]  # 1: the owner's ATTACH, 2: the coder's ATTACH
    assert report["errors"] == {
        "staleStep": "ABORTED",
        "missingAgent": "NOT_FOUND",
        "noKey": "UNAUTHENTICATED",
        "seqZero": "INVALID_ARGUMENT",
        "seqZeroFields": [
            {"field": "seq", "description": "must be between 1 and the tree size 4, got 0"}
        ],
        "wrongTransport": "UNAVAILABLE",
    }
    verified = report["verified"]
    assert (verified["seq"], verified["treeSize"], verified["consistencyFrom"]) == (4, 4, 3)
    assert verified["proofLength"] == 2

    # Python sees what TypeScript did: the same agents, block, window and conversation.
    planner_id, coder_id = report["agentIds"]
    with servers.channel(servers.state) as channel:
        stub = state_client(channel, servers.state_key)
        planner = stub.GetAgent(state_pb2.GetAgentRequest(agent_id=planner_id)).agent
        coder = stub.GetAgent(state_pb2.GetAgentRequest(agent_id=coder_id)).agent
        assert [b.label for b in planner.blocks] == ["persona", "project"]
        assert [b.id for b in coder.blocks] == [report["blockId"]]
        assert coder.blocks[0].value == "Ship the TypeScript client.\nDeadline: Friday."
        assert planner.context_version == report["contextVersion"]
        assert list(planner.message_ids[1:]) == report["stepMessageIds"]
    with servers.channel(servers.recall) as channel:
        stub = recall_client(channel, servers.recall_key)
        stream_id = report["streamId"]
        records = stub.Read(
            recall_pb2.ReadRequest(stream_id=stream_id, include_events=True)
        ).records
        assert [(r.seq, r.kind, r.source_agent_id) for r in records] == [
            (1, recall_pb2.RECORD_KIND_ATTACH, ""),
            (2, recall_pb2.RECORD_KIND_ATTACH, ""),
            (3, recall_pb2.RECORD_KIND_MESSAGE, planner_id),
            (4, recall_pb2.RECORD_KIND_MESSAGE, coder_id),
        ]
        assert records[3].content == "On it — tests first. ✅"
        # The leaf, root and chain head TypeScript verified are the ones Python verifies.
        checkpoint = stub.GetCheckpoint(
            recall_pb2.GetCheckpointRequest(stream_id=stream_id)
        ).checkpoint
        public_key = stub.GetPublicKey(recall_pb2.GetPublicKeyRequest()).public_key
        genesis = stub.GetStream(recall_pb2.GetStreamRequest(stream_id=stream_id)).stream.genesis
        verify.verify_log(list(records), genesis, checkpoint, public_key)
        assert verify.leaf_hash(records[3]).hex() == verified["leafHash"]
        assert (checkpoint.root.hex(), checkpoint.chain_head.hex()) == (
            verified["root"],
            verified["chainHead"],
        )
        assert checkpoint.key_id == verified["keyId"]
