// TLS unless loopback: the rule that decides a client's transport (as in the Python client).

import assert from "node:assert/strict";
import { test } from "node:test";

import { channelSettings, isLoopback, usesTls } from "../src/channels.js";

test("loopback addresses are recognised, and nothing else", () => {
  for (const address of [
    "127.0.0.1:50051",
    "127.1.2.3:1",
    "localhost:50052",
    "[::1]:50051",
    "::1",
    "ipv4:127.0.0.1:50051",
    "dns:///localhost:50051",
    "unix:/tmp/cairn.sock",
  ]) {
    assert.equal(isLoopback(address), true, address);
  }
  for (const address of [
    "10.0.0.1:50051",
    "cairn.example.com:443",
    "[2001:db8::1]:50051",
    "128.0.0.1:50051",
    "localhost.example.com:50051",
    "dns:///cairn.internal:50051",
  ]) {
    assert.equal(isLoopback(address), false, address);
  }
});

test("TLS by default except to loopback; false and true force either", () => {
  assert.equal(usesTls("127.0.0.1:50051", undefined), false);
  assert.equal(usesTls("cairn.example.com:443", undefined), true);
  assert.equal(usesTls("cairn.example.com:443", false), false);
  assert.equal(usesTls("127.0.0.1:50051", true), true);
  assert.equal(usesTls("127.0.0.1:50051", { serverName: "cairn.test" }), true);
  assert.equal(channelSettings("cairn.example.com:443", undefined).credentials._isSecure(), true);
  assert.equal(channelSettings("localhost:50051", undefined).credentials._isSecure(), false);
});

test("a server name is asked for in the handshake and the authority", () => {
  assert.deepEqual(channelSettings("127.0.0.1:1", { serverName: "cairn.test" }).options, {
    "grpc.ssl_target_name_override": "cairn.test",
    "grpc.default_authority": "cairn.test",
  });
  assert.deepEqual(channelSettings("127.0.0.1:1", true).options, {});
});

test("a client certificate needs its key", () => {
  assert.throws(() => channelSettings("cairn.example.com:443", { certChain: Buffer.from("x") }), {
    message: "a client certificate needs both certChain and privateKey",
  });
});
