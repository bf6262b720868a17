/**
 * Verify what a Cairn recall service returns, without trusting it.
 *
 * A TypeScript port of the Python reference `clients/python/cairn/verify.py`, following the
 * byte-exact spec in `docs/log-format.md`: content, leaf and chain hashes of records; Ed25519
 * checkpoint signatures under a public key you pinned; RFC 6962 inclusion and consistency
 * proofs (the verification algorithms of RFC 9162 §2.1.3.2 and §2.1.4.2). Only `node:crypto`.
 * Each check returns nothing (or the value it computed) and throws `VerificationError` when the
 * data does not verify, with the same message the Python reference gives.
 *
 *     const head = verifyRecords(records, stream.genesis);     // every record from seq 1
 *     verifyCheckpoint(checkpoint, pinnedPublicKey);
 *     verifyInclusion(leafHash(record), record.seq - 1n, checkpoint.size, proof, checkpoint.root);
 *     verifyConsistency(old.size, now.size, proof, old.root, now.root);
 */

import { createHash, createPublicKey, verify as verifySignature } from "node:crypto";

/** The fields of a record that enter its hashes (the generated `Record` has them all). */
export interface RecordFields {
  streamId: string;
  seq: bigint;
  kind: number;
  sourceAgentId: string;
  writtenBy: string;
  subjectAgentId: string;
  role: number;
  targetSeq: bigint;
  contentHash: Uint8Array;
  tags: readonly string[];
  metadataJson: string;
  createdAt?: TimestampFields | undefined;
  idempotencyKey: string;
  /** When the message was said, as its writer gave it; unset when not given. */
  occurredAt?: TimestampFields | undefined;
}

/** A record as the service returns it: its fields, content, salt and stored hashes. */
export interface VerifiableRecord extends RecordFields {
  content: string;
  salt: Uint8Array;
  leafHash: Uint8Array;
  chainHash: Uint8Array;
}

/** The signed fields of a checkpoint (the generated `Checkpoint` has them all). */
export interface CheckpointFields {
  tenant: string;
  streamId: string;
  size: bigint;
  root: Uint8Array;
  chainHead: Uint8Array;
  time?: TimestampFields | undefined;
  signature: Uint8Array;
}

/** A `google.protobuf.Timestamp`. */
export interface TimestampFields {
  seconds: bigint;
  nanos: number;
}

/** The data does not verify; `seq` names the first record at fault, when one does. */
export class VerificationError extends Error {
  constructor(
    message: string,
    readonly seq?: bigint,
  ) {
    super(message);
    this.name = "VerificationError";
  }
}

const HASH_SIZE = 32;
const U64_MAX = (1n << 64n) - 1n;
const I64_MIN = -(1n << 63n);
const I64_MAX = (1n << 63n) - 1n;

// --- encoding (docs/log-format.md §1) -------------------------------------------------------

function u8(value: number): Uint8Array {
  if (!Number.isInteger(value) || value < 0 || value > 0xff) {
    throw new VerificationError(`${value} does not fit u8`);
  }
  return Uint8Array.of(value);
}

function u32(value: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, value);
  return out;
}

function u64(value: bigint): Uint8Array {
  if (value < 0n || value > U64_MAX) {
    throw new VerificationError(`${value} does not fit u64`);
  }
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, value);
  return out;
}

function i64(value: bigint): Uint8Array {
  if (value < I64_MIN || value > I64_MAX) {
    throw new VerificationError(`${value} does not fit i64`);
  }
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigInt64(0, value);
  return out;
}

function text(value: string): Uint8Array {
  const raw = new TextEncoder().encode(value);
  return concat(u32(raw.length), raw);
}

function hash32(value: Uint8Array, what: string): Uint8Array {
  if (value.length !== HASH_SIZE) {
    throw new VerificationError(`${what} must be ${HASH_SIZE} bytes, got ${value.length}`);
  }
  return value;
}

function micros(ts: TimestampFields | undefined): bigint {
  if (ts === undefined) return 0n;
  return ts.seconds * 1_000_000n + BigInt(Math.floor(ts.nanos / 1000));
}

function concat(...parts: Uint8Array[]): Uint8Array {
  return Buffer.concat(parts);
}

function sha256(...parts: Uint8Array[]): Uint8Array {
  const digest = createHash("sha256");
  for (const part of parts) digest.update(part);
  return new Uint8Array(digest.digest());
}

/** True when two byte strings are equal. */
export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && Buffer.compare(a, b) === 0;
}

// --- records (§2-§4) ------------------------------------------------------------------------

/** SHA-256(salt ‖ UTF-8 content). */
export function contentHash(salt: Uint8Array, content: string): Uint8Array {
  return sha256(salt, new TextEncoder().encode(content));
}

/** The canonical bytes of a record (every field but its hashes, salt and content): domain
 * v1, or v2 with `occurredAt` appended when the record has one. */
export function recordBytes(record: RecordFields): Uint8Array {
  const occurred = record.occurredAt !== undefined;
  return concat(
    text(occurred ? "cairn.recall.record.v2" : "cairn.recall.record.v1"),
    text(record.streamId),
    u64(record.seq),
    u8(record.kind),
    text(record.sourceAgentId),
    text(record.writtenBy),
    text(record.subjectAgentId),
    u8(record.role),
    u64(record.targetSeq),
    hash32(record.contentHash, "content_hash"),
    u32(record.tags.length),
    ...record.tags.map(text),
    text(record.metadataJson),
    i64(micros(record.createdAt)),
    text(record.idempotencyKey),
    occurred ? i64(micros(record.occurredAt)) : new Uint8Array(0),
  );
}

/** SHA-256(0x00 ‖ canonical bytes): the record's Merkle leaf. */
export function leafHash(record: RecordFields): Uint8Array {
  return sha256(Uint8Array.of(0), recordBytes(record));
}

/** SHA-256(previous chain hash ‖ leaf hash). */
export function chainHash(previous: Uint8Array, leaf: Uint8Array): Uint8Array {
  return sha256(previous, leaf);
}

/** A stream's chain_hash[0], from its tenant, id, kind and creation time. */
export function genesisHash(
  tenant: string,
  streamId: string,
  kind: number,
  createdAt: TimestampFields | undefined,
): Uint8Array {
  return sha256(
    text("cairn.recall.genesis.v1"),
    text(tenant),
    text(streamId),
    u8(kind),
    i64(micros(createdAt)),
  );
}

/**
 * Recomputes content, leaf and chain hashes of consecutive records starting at `firstSeq`,
 * whose predecessor's chain hash is `previous` (the stream's genesis for seq 1). Returns the
 * chain hash of the last record (the chain head).
 */
export function verifyRecords(
  records: Iterable<VerifiableRecord>,
  previous: Uint8Array,
  firstSeq = 1n,
): Uint8Array {
  let expected = firstSeq;
  for (const record of records) {
    if (record.seq !== expected) {
      throw new VerificationError(
        `expected record ${expected}, got record ${record.seq}`,
        expected,
      );
    }
    if (record.salt.length > 0) {
      if (!bytesEqual(contentHash(record.salt, record.content), record.contentHash)) {
        throw new VerificationError(
          `record ${record.seq}: content does not match content_hash`,
          record.seq,
        );
      }
    } else if (record.content !== "") {
      throw new VerificationError(
        `record ${record.seq}: content without a salt cannot be verified`,
        record.seq,
      );
    }
    const leaf = leafHash(record);
    if (!bytesEqual(leaf, record.leafHash)) {
      throw new VerificationError(
        `record ${record.seq}: leaf_hash does not match the record's fields`,
        record.seq,
      );
    }
    previous = chainHash(previous, leaf);
    if (!bytesEqual(previous, record.chainHash)) {
      throw new VerificationError(
        `record ${record.seq}: chain_hash does not follow from the previous record`,
        record.seq,
      );
    }
    expected += 1n;
  }
  return previous;
}

// --- checkpoints (§5) -----------------------------------------------------------------------

/** The bytes a checkpoint's signature covers. */
export function checkpointBytes(checkpoint: CheckpointFields): Uint8Array {
  return concat(
    text("cairn.recall.checkpoint.v1"),
    text(checkpoint.tenant),
    text(checkpoint.streamId),
    u64(checkpoint.size),
    hash32(checkpoint.root, "root"),
    hash32(checkpoint.chainHead, "chain_head"),
    i64(micros(checkpoint.time)),
  );
}

// An Ed25519 SubjectPublicKeyInfo (RFC 8410) is this DER prefix and the raw 32-byte key.
const ED25519_SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

/** Checks the Ed25519 signature of a checkpoint under a raw 32-byte public key. */
export function verifyCheckpoint(checkpoint: CheckpointFields, publicKey: Uint8Array): void {
  if (publicKey.length !== 32) {
    throw new VerificationError(
      `not an Ed25519 public key: expected 32 bytes, got ${publicKey.length}`,
    );
  }
  const key = createPublicKey({
    key: Buffer.concat([ED25519_SPKI_PREFIX, publicKey]),
    format: "der",
    type: "spki",
  });
  const message = checkpointBytes(checkpoint);
  if (!verifySignature(null, message, key, checkpoint.signature)) {
    throw new VerificationError(
      `the checkpoint of stream '${checkpoint.streamId}' at size ${checkpoint.size} is ` +
        "not signed by this key",
    );
  }
}

/**
 * Checks that `records` (seqs 1..n, n >= checkpoint.size) extend a checkpoint you kept: its
 * signature, and the chain head and Merkle root at its size.
 */
export function verifyLog(
  records: readonly VerifiableRecord[],
  genesis: Uint8Array,
  checkpoint: CheckpointFields,
  publicKey: Uint8Array,
): void {
  verifyCheckpoint(checkpoint, publicKey);
  const given = BigInt(records.length);
  if (given < checkpoint.size) {
    throw new VerificationError(
      `the checkpoint covers ${checkpoint.size} records but only ${given} were ` +
        `given: records ${given + 1n}-${checkpoint.size} are missing`,
      given + 1n,
    );
  }
  const covered = records.slice(0, Number(checkpoint.size));
  const head = verifyRecords(covered, genesis);
  if (!bytesEqual(head, checkpoint.chainHead)) {
    throw new VerificationError(
      `the chain head at record ${checkpoint.size} differs from the checkpoint's: the ` +
        "history it covers was rewritten",
    );
  }
  if (!bytesEqual(rootFromLeaves(covered.map((r) => r.leafHash)), checkpoint.root)) {
    throw new VerificationError("the Merkle root differs from the checkpoint's");
  }
}

// --- RFC 6962 Merkle trees (§6) -------------------------------------------------------------

function node(left: Uint8Array, right: Uint8Array): Uint8Array {
  return sha256(Uint8Array.of(1), left, right);
}

/** MTH(D[n]) of RFC 6962 §2.1, from leaf hashes (SHA-256 of "" for no leaves). */
export function rootFromLeaves(leaves: readonly Uint8Array[]): Uint8Array {
  if (leaves.length === 0) return sha256();
  let level = [...leaves];
  while (level.length > 1) {
    const paired: Uint8Array[] = [];
    for (let i = 0; i + 1 < level.length; i += 2) paired.push(node(level[i]!, level[i + 1]!));
    if (level.length % 2 === 1) paired.push(level[level.length - 1]!);
    level = paired;
  }
  return level[0]!;
}

/**
 * Checks that `leaf` is leaf `index` of the tree of `size` leaves with head `root`
 * (RFC 9162 §2.1.3.2). For record `seq` the index is `seq - 1n`.
 */
export function verifyInclusion(
  leaf: Uint8Array,
  index: bigint,
  size: bigint,
  proof: readonly Uint8Array[],
  root: Uint8Array,
): void {
  if (!(index >= 0n && index < size)) {
    throw new VerificationError(`leaf index ${index} is outside a tree of size ${size}`);
  }
  let fn = index;
  let sn = size - 1n;
  let r = leaf;
  for (const p of proof) {
    if (sn === 0n) throw new VerificationError("the inclusion proof is too long");
    if ((fn & 1n) === 1n || fn === sn) {
      r = node(p, r);
      while ((fn & 1n) === 0n && fn !== 0n) {
        fn >>= 1n;
        sn >>= 1n;
      }
    } else {
      r = node(r, p);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  if (sn !== 0n) throw new VerificationError("the inclusion proof is too short");
  if (!bytesEqual(r, root)) {
    throw new VerificationError("the inclusion proof does not lead to the root");
  }
}

/**
 * Checks that the tree of `size2` leaves with head `root2` extends the tree of `size1` leaves
 * with head `root1` (RFC 9162 §2.1.4.2).
 */
export function verifyConsistency(
  size1: bigint,
  size2: bigint,
  proof: readonly Uint8Array[],
  root1: Uint8Array,
  root2: Uint8Array,
): void {
  if (!(size1 >= 0n && size1 <= size2)) {
    throw new VerificationError(`size1 ${size1} and size2 ${size2} are not 0 <= size1 <= size2`);
  }
  if (size1 === size2) {
    if (proof.length > 0) throw new VerificationError("a proof between equal sizes must be empty");
    if (!bytesEqual(root1, root2)) throw new VerificationError("equal sizes with different roots");
    return;
  }
  if (size1 === 0n) {
    if (proof.length > 0) throw new VerificationError("a proof from the empty tree must be empty");
    return;
  }
  if (proof.length === 0) throw new VerificationError("the consistency proof is empty");
  const path = (size1 & (size1 - 1n)) === 0n ? [root1, ...proof] : [...proof];
  let fn = size1 - 1n;
  let sn = size2 - 1n;
  while ((fn & 1n) === 1n) {
    fn >>= 1n;
    sn >>= 1n;
  }
  let fr = path[0]!;
  let sr = path[0]!;
  for (const c of path.slice(1)) {
    if (sn === 0n) throw new VerificationError("the consistency proof is too long");
    if ((fn & 1n) === 1n || fn === sn) {
      fr = node(c, fr);
      sr = node(c, sr);
      while ((fn & 1n) === 0n && fn !== 0n) {
        fn >>= 1n;
        sn >>= 1n;
      }
    } else {
      sr = node(sr, c);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  if (sn !== 0n) throw new VerificationError("the consistency proof is too short");
  if (!bytesEqual(fr, root1)) {
    throw new VerificationError("the consistency proof does not lead to the first root");
  }
  if (!bytesEqual(sr, root2)) {
    throw new VerificationError("the consistency proof does not lead to the second root");
  }
}
