/**
 * The TypeScript client against running state and recall services, end to end:
 *
 *   1. two agents share a memory block; one edits it through a memory tool and the other's next
 *      compiled prompt shows the edit;
 *   2. a step is committed to the first agent's window;
 *   3. both agents write to a shared conversation on the recall service and read it back;
 *   4. an inclusion proof of the second agent's message is verified here, in TypeScript, against
 *      the server's signed checkpoint and the public key from GetPublicKey; so are the whole
 *      chain and a consistency proof, and a tampered record is caught;
 *   5. errors arrive with their gRPC codes.
 *
 * Environment: CAIRN_STATE_ADDRESS, CAIRN_RECALL_ADDRESS (host:port) and CAIRN_STATE_API_KEY,
 * CAIRN_RECALL_API_KEY (admin keys of one tenant). With CAIRN_TLS_ROOT_CERT (a PEM file) both
 * are reached over TLS, trusting that certificate, for the name CAIRN_TLS_SERVER_NAME when set.
 * On success it prints one JSON line
 * ({"ok": true, ...} with the ids it created and what it verified) and exits 0; on failure it
 * prints the error to stderr and exits 1.
 */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";

import {
  CairnError,
  type ConnectOptions,
  Status,
  bytesEqual,
  common,
  connectRecall,
  connectState,
  leafHash,
  recall,
  verifyCheckpoint,
  verifyConsistency,
  verifyInclusion,
  verifyLog,
  verifyRecords,
  VerificationError,
} from "../src/index.js";

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString("hex");

/** Runs `call`, which must fail with `code`; returns the error. */
async function failsWith(code: Status, call: () => Promise<unknown>): Promise<CairnError> {
  try {
    await call();
  } catch (error) {
    assert.ok(error instanceof CairnError, `expected a CairnError, got ${String(error)}`);
    assert.equal(error.codeName, Status[code]);
    return error;
  }
  throw new Error(`the call succeeded but should have failed with ${Status[code]}`);
}

async function main(): Promise<void> {
  const rootCert = process.env["CAIRN_TLS_ROOT_CERT"];
  const tls: ConnectOptions["tls"] = rootCert
    ? { rootCerts: readFileSync(rootCert), serverName: process.env["CAIRN_TLS_SERVER_NAME"] }
    : false;
  const state = connectState(env("CAIRN_STATE_ADDRESS"), {
    apiKey: env("CAIRN_STATE_API_KEY"),
    tls,
  });
  const logs = connectRecall(env("CAIRN_RECALL_ADDRESS"), {
    apiKey: env("CAIRN_RECALL_API_KEY"),
    tls,
  });
  try {
    // 1. Two agents sharing a block.
    const { block: shared } = await state.createBlock({
      block: { label: "project", value: "Ship the TypeScript client.", description: "Shared." },
    });
    assert.ok(shared);
    const { agent: planner } = await state.createAgent({
      name: "planner",
      system: "You plan.\n{CORE_MEMORY}",
      memoryBlocks: [{ label: "persona", value: "I plan the work." }],
      blockIds: [shared.id],
    });
    const { agent: coder } = await state.createAgent({
      name: "coder",
      system: "You code.\n{CORE_MEMORY}",
      blockIds: [shared.id],
    });
    assert.ok(planner && coder);
    assert.deepEqual(
      coder.blocks.map((b) => b.id),
      [shared.id],
    );
    assert.deepEqual(
      planner.blocks.map((b) => b.label),
      ["persona", "project"],
    );

    const first = await state.compileContext({ agentId: planner.id });
    assert.match(first.systemPrompt, /Ship the TypeScript client\./);
    assert.equal(
      first.promptHash,
      createHash("sha256").update(first.systemPrompt).digest("hex"),
      "prompt_hash is SHA-256 of the prompt",
    );

    const edit = await state.executeMemoryTool({
      agentId: planner.id,
      toolName: "core_memory_append",
      argumentsJson: JSON.stringify({ label: "project", content: "Deadline: Friday." }),
    });
    assert.equal(edit.ok, true, edit.result);
    assert.deepEqual([...edit.rebuiltAgentIds].sort(), [planner.id, coder.id].sort());
    const coderView = await state.compileContext({ agentId: coder.id });
    assert.match(coderView.systemPrompt, /Ship the TypeScript client\.\nDeadline: Friday\./);

    // 2. A step in the planner's window.
    const context = await state.compileContext({ agentId: planner.id });
    const step = await state.commitStep({
      agentId: planner.id,
      stepId: "step-1",
      baseContextVersion: context.contextVersion,
      messages: [
        { role: common.MessageRole.MESSAGE_ROLE_USER, content: "When do we ship?" },
        { role: common.MessageRole.MESSAGE_ROLE_ASSISTANT, content: "Friday." },
      ],
    });
    assert.equal(step.replayed, false);
    assert.equal(step.contextVersion, context.contextVersion + 1n);
    assert.deepEqual(
      step.messages.map((m) => m.content),
      ["When do we ship?", "Friday."],
    );
    const after = await state.compileContext({ agentId: planner.id });
    assert.deepEqual(
      after.messages.map((m) => m.content),
      ["When do we ship?", "Friday."],
    );
    const stale = await failsWith(Status.ABORTED, () =>
      state.commitStep({
        agentId: planner.id,
        stepId: "step-2",
        baseContextVersion: context.contextVersion,
        messages: [{ role: common.MessageRole.MESSAGE_ROLE_USER, content: "Again?" }],
      }),
    );

    // 3. A shared conversation.
    const { publicKey, keyId, algorithm } = await logs.getPublicKey({});
    assert.equal(algorithm, "Ed25519");
    assert.equal(keyId, createHash("sha256").update(publicKey).digest("hex").slice(0, 16));

    const created = await logs.createStream({
      kind: recall.StreamKind.STREAM_KIND_CONVERSATION,
      ownerAgentId: planner.id,
    });
    const stream = created.stream!;
    await logs.attach({
      streamId: stream.id,
      agentId: coder.id,
      role: recall.ParticipantRole.PARTICIPANT_ROLE_WRITER,
    });
    const hello = await logs.write({
      streamId: stream.id,
      entry: {
        sourceAgentId: planner.id,
        content: "Plan: ship the TypeScript client on Friday.",
        tags: ["plan"],
        metadataJson: JSON.stringify({ from: "typescript" }),
        idempotencyKey: "plan-1",
      },
    });
    const reply = await logs.write({
      streamId: stream.id,
      entry: { sourceAgentId: coder.id, content: "On it — tests first. ✅" },
    });
    const retried = await logs.write({
      streamId: stream.id,
      entry: {
        sourceAgentId: planner.id,
        content: "Plan: ship the TypeScript client on Friday.",
        tags: ["plan"],
        metadataJson: JSON.stringify({ from: "typescript" }),
        idempotencyKey: "plan-1",
      },
    });
    assert.equal(retried.replayed, true);
    assert.equal(retried.record!.seq, hello.record!.seq);

    const { records: messages } = await logs.read({ streamId: stream.id });
    assert.deepEqual(
      messages.map((r) => [r.seq, r.sourceAgentId, r.content]),
      [
        [hello.record!.seq, planner.id, "Plan: ship the TypeScript client on Friday."],
        [reply.record!.seq, coder.id, "On it — tests first. ✅"],
      ],
    );
    assert.equal(messages[0]!.metadataJson, '{"from":"typescript"}');
    const fromCoder = await logs.read({ streamId: stream.id, sourceAgentIds: [coder.id] });
    assert.deepEqual(
      fromCoder.records.map((r) => r.content),
      ["On it — tests first. ✅"],
    );

    // 4. Verify, trusting only the pinned public key.
    const record = messages[1]!;
    const proof = await logs.getInclusionProof({ streamId: stream.id, seq: record.seq });
    const checkpoint = proof.checkpoint!;
    verifyCheckpoint(checkpoint, publicKey);
    assert.equal(checkpoint.keyId, keyId);
    const leaf = leafHash(record); // recomputed from the record's fields, not taken from the server
    assert.ok(bytesEqual(leaf, proof.leafHash), "the server's leaf hash is the recomputed one");
    verifyInclusion(leaf, record.seq - 1n, checkpoint.size, proof.proof, checkpoint.root);

    const everything = await logs.read({ streamId: stream.id, includeEvents: true });
    const { stream: now } = await logs.getStream({ streamId: stream.id });
    verifyLog(everything.records, now!.genesis, checkpoint, publicKey);
    const head = verifyRecords(everything.records, now!.genesis);
    assert.ok(bytesEqual(head, checkpoint.chainHead));

    const kept = hello.checkpoint!; // what a client keeps after its write
    verifyCheckpoint(kept, publicKey);
    const consistency = await logs.getConsistencyProof({
      streamId: stream.id,
      fromSize: kept.size,
      toSize: checkpoint.size,
    });
    verifyConsistency(kept.size, checkpoint.size, consistency.proof, kept.root, checkpoint.root);

    // A changed record, or a root the server did not sign, does not verify.
    const tampered = { ...record, content: "On it — no tests. ✅" };
    assert.throws(
      () => verifyRecords([...everything.records.slice(0, -1), tampered], now!.genesis),
      {
        message: `record ${record.seq}: content does not match content_hash`,
      },
    );
    assert.throws(
      () =>
        verifyInclusion(
          leafHash({ ...record, tags: ["x"] }),
          record.seq - 1n,
          checkpoint.size,
          proof.proof,
          checkpoint.root,
        ),
      VerificationError,
    );
    assert.throws(
      () => verifyCheckpoint({ ...checkpoint, root: kept.root }, publicKey),
      VerificationError,
    );

    // 5. Errors carry their gRPC codes.
    const missing = await failsWith(Status.NOT_FOUND, () =>
      state.getAgent({ agentId: "agent-does-not-exist" }),
    );
    const anonymous = connectRecall(env("CAIRN_RECALL_ADDRESS"), { tls });
    const unauthenticated = await failsWith(Status.UNAUTHENTICATED, () =>
      anonymous.getPublicKey({}),
    );
    anonymous.close();
    const invalid = await failsWith(Status.INVALID_ARGUMENT, () =>
      logs.getInclusionProof({ streamId: stream.id, seq: 0n }),
    );

    // Plaintext to a TLS server, or TLS to a plaintext one, does not connect.
    const mismatched = connectRecall(env("CAIRN_RECALL_ADDRESS"), {
      apiKey: env("CAIRN_RECALL_API_KEY"),
      tls: tls ? false : { serverName: "localhost" },
      deadlineMs: 5_000,
    });
    const wrongTransport = await failsWith(Status.UNAVAILABLE, () => mismatched.getPublicKey({}));
    mismatched.close();

    console.log(
      JSON.stringify({
        ok: true,
        transport: tls ? "tls" : "plaintext",
        blockId: shared.id,
        agentIds: [planner.id, coder.id],
        sharedPrompt: coderView.systemPrompt.includes("Deadline: Friday."),
        stepMessageIds: step.messages.map((m) => m.id),
        contextVersion: Number(step.contextVersion),
        streamId: stream.id,
        messageSeqs: messages.map((r) => Number(r.seq)),
        verified: {
          seq: Number(record.seq),
          leafHash: hex(leaf),
          treeSize: Number(checkpoint.size),
          root: hex(checkpoint.root),
          chainHead: hex(checkpoint.chainHead),
          keyId,
          proofLength: proof.proof.length,
          consistencyFrom: Number(kept.size),
        },
        errors: {
          staleStep: stale.codeName,
          missingAgent: missing.codeName,
          noKey: unauthenticated.codeName,
          seqZero: invalid.codeName,
          seqZeroFields: invalid.fieldViolations,
          wrongTransport: wrongTransport.codeName,
        },
      }),
    );
  } finally {
    state.close();
    logs.close();
  }
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? (error.stack ?? error.message) : String(error));
  process.exit(1);
});
