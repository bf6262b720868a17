// The TypeScript verifier against vectors computed by the Python reference
// (test/fixtures/verify-vectors.json, written by scripts/make_verify_vectors.py): every hash and
// byte string must be equal, and every input the Python side accepts or rejects must be accepted
// or rejected here with the same message.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import {
  type CheckpointFields,
  VerificationError,
  type VerifiableRecord,
  chainHash,
  checkpointBytes,
  contentHash,
  genesisHash,
  leafHash,
  recordBytes,
  rootFromLeaves,
  verifyCheckpoint,
  verifyConsistency,
  verifyInclusion,
  verifyLog,
  verifyRecords,
} from "../src/verify.js";

type Json = any; // eslint-disable-line @typescript-eslint/no-explicit-any

const vectors: Json = JSON.parse(
  readFileSync(new URL("../../test/fixtures/verify-vectors.json", import.meta.url), "utf8"),
);

const hex = (value: string): Uint8Array => new Uint8Array(Buffer.from(value, "hex"));
const toHex = (value: Uint8Array): string => Buffer.from(value).toString("hex");
const timestamp = (t: Json) => ({ seconds: BigInt(t.seconds), nanos: t.nanos as number });

function record(r: Json): VerifiableRecord {
  return {
    streamId: r.streamId,
    seq: BigInt(r.seq),
    kind: r.kind,
    sourceAgentId: r.sourceAgentId,
    writtenBy: r.writtenBy,
    subjectAgentId: r.subjectAgentId,
    role: r.role,
    targetSeq: BigInt(r.targetSeq),
    content: r.content,
    salt: hex(r.salt),
    contentHash: hex(r.contentHash),
    tags: r.tags,
    metadataJson: r.metadataJson,
    createdAt: timestamp(r.createdAt),
    idempotencyKey: r.idempotencyKey,
    occurredAt: r.occurredAt === undefined ? undefined : timestamp(r.occurredAt),
    leafHash: hex(r.leafHash),
    chainHash: hex(r.chainHash),
  };
}

function checkpoint(c: Json): CheckpointFields {
  return {
    tenant: c.tenant,
    streamId: c.streamId,
    size: BigInt(c.size),
    root: hex(c.root),
    chainHead: hex(c.chainHead),
    time: timestamp(c.time),
    signature: hex(c.signature),
  };
}

/** Runs `check` and asserts the outcome the Python reference recorded for this case. */
function assertOutcome(expected: Json, check: () => unknown): void {
  let error: unknown;
  try {
    check();
  } catch (caught) {
    error = caught;
  }
  if (expected.ok) {
    assert.equal(error, undefined, `${expected.name}: accepted by Python, rejected here`);
    return;
  }
  assert.ok(error instanceof VerificationError, `${expected.name}: rejected by Python only`);
  if (expected.errorPrefix !== undefined) {
    assert.ok(error.message.startsWith(expected.errorPrefix), error.message);
  } else {
    assert.equal(error.message, expected.error, expected.name);
  }
  if ("seq" in expected) {
    const seq = expected.seq === null ? undefined : BigInt(expected.seq);
    assert.equal(error.seq, seq, `${expected.name}: seq`);
  }
}

const served: VerifiableRecord[] = vectors.records.map((v: Json) => record(v.record));

describe("records", () => {
  test("the genesis hash is the Python one", () => {
    const g = vectors.genesis;
    const hash = genesisHash(g.tenant, g.streamId, g.kind, timestamp(g.createdAt));
    assert.equal(toHex(hash), g.hash);
    assert.equal(g.hash, "09a20c17d2f60be5c2cd71ffaf7848f3e91171af759f5758605ce2fe0d948b9e");
  });

  test("canonical bytes, content, leaf and chain hashes are the Python ones", () => {
    let previous = hex(vectors.genesis.hash);
    for (const [i, v] of vectors.records.entries()) {
      const r = served[i]!;
      assert.equal(toHex(recordBytes(r)), v.canonical, `record ${r.seq}: canonical bytes`);
      assert.equal(toHex(leafHash(r)), v.leafHash, `record ${r.seq}: leaf hash`);
      if (r.salt.length > 0) {
        assert.equal(toHex(contentHash(r.salt, r.content)), v.record.contentHash);
      }
      previous = chainHash(previous, leafHash(r));
      assert.equal(toHex(previous), v.record.chainHash, `record ${r.seq}: chain hash`);
    }
    // docs/log-format.md §7, record 1.
    assert.equal(
      toHex(leafHash(served[0]!)),
      "308ffc9baa75fbcfe846b96e5c6b318e719cf452fd803399da964de1ae81a93e",
    );
  });

  test("times before 1970 and seqs past 2^53 encode exactly", () => {
    assert.equal(vectors.encodingCorners.length, 3);
    for (const v of vectors.encodingCorners) {
      const r = record(v.record);
      assert.equal(toHex(recordBytes(r)), v.canonical, v.name);
      assert.equal(toHex(leafHash(r)), v.leafHash, v.name);
    }
  });

  test("a content_hash that is not 32 bytes is refused", () => {
    const short = { ...served[0]!, contentHash: served[0]!.contentHash.subarray(0, 31) };
    assert.throws(() => recordBytes(short), {
      name: "VerificationError",
      message: "content_hash must be 32 bytes, got 31",
    });
  });

  test("chains verify, and every tampered chain fails where Python says", () => {
    assert.equal(vectors.chains.length, 23);
    for (const c of vectors.chains) {
      const given = c.order.map((i: number) => ({ ...vectors.records[i].record }));
      if (c.edit) Object.assign(given[c.edit.at], c.edit.fields);
      const head = (): Uint8Array =>
        verifyRecords(given.map(record), hex(c.previous), BigInt(c.firstSeq));
      assertOutcome(c, head);
      if (c.ok) assert.equal(toHex(head()), toHex(served[served.length - 1]!.chainHash));
    }
  });
});

describe("Merkle trees", () => {
  test("tree heads of every prefix are the Python ones", () => {
    for (const t of vectors.trees) {
      const leaves = t.leaves.map(hex);
      for (let n = 0; n <= leaves.length; n++) {
        assert.equal(toHex(rootFromLeaves(leaves.slice(0, n))), t.roots[n], `${t.name}, ${n}`);
      }
    }
    // RFC 6962's reference tree of 8 leaves (docs/log-format.md §7).
    assert.equal(
      vectors.trees[0].roots[8],
      "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    );
  });

  test("inclusion proofs: each accepted or rejected as in Python", () => {
    assert.equal(vectors.inclusion.length, 215);
    for (const c of vectors.inclusion) {
      assertOutcome(c, () =>
        verifyInclusion(
          hex(c.leaf),
          BigInt(c.index),
          BigInt(c.size),
          c.proof.map(hex),
          hex(c.root),
        ),
      );
    }
  });

  test("consistency proofs: each accepted or rejected as in Python", () => {
    assert.equal(vectors.consistency.length, 159);
    for (const c of vectors.consistency) {
      assertOutcome(c, () =>
        verifyConsistency(
          BigInt(c.size1),
          BigInt(c.size2),
          c.proof.map(hex),
          hex(c.root1),
          hex(c.root2),
        ),
      );
    }
  });
});

describe("checkpoints", () => {
  test("the signed bytes are the Python ones", () => {
    const first = vectors.checkpoints.cases[0];
    // docs/log-format.md §7.
    assert.equal(
      first.signedBytes,
      "0000001a636169726e2e726563616c6c2e636865636b706f696e742e76310000000461636d650000000767656e" +
        "6572616c0000000000000002c357ade98375cffff3a39c5f91e60b4f9263eaac8e0c530b17004b7e4f9a54" +
        "637412914fdadec58ca61e893814973e926691534a036e2670516bdbf3ae59826100064748463ec480",
    );
    for (const c of vectors.checkpoints.cases) {
      if (c.signedBytes === null) continue;
      assert.equal(toHex(checkpointBytes(checkpoint(c.checkpoint))), c.signedBytes, c.name);
    }
  });

  test("signatures: each accepted or rejected as in Python", () => {
    assert.equal(vectors.checkpoints.cases.length, 30);
    for (const c of vectors.checkpoints.cases) {
      assertOutcome(c, () => verifyCheckpoint(checkpoint(c.checkpoint), hex(c.publicKey)));
    }
  });

  test("a log against a kept checkpoint: accepted or rejected as in Python", () => {
    const publicKey = hex(vectors.checkpoints.publicKey);
    const genesis = hex(vectors.genesis.hash);
    assert.equal(vectors.logs.length, 7);
    for (const c of vectors.logs) {
      const given: VerifiableRecord[] = c.order
        ? c.order.map((i: number) => served[i])
        : c.records.map(record);
      assertOutcome(c, () => verifyLog(given, genesis, checkpoint(c.checkpoint), publicKey));
    }
  });
});
