// The typed wrapper against an in-process grpc-js server that records what it receives: the
// API key on every call, deadlines, partial requests, error codes and server streams.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import * as grpc from "@grpc/grpc-js";

import { CairnError, Status, connect, connectRecall, connectState } from "../src/client.js";
import {
  GetInclusionProofResponse,
  GetStreamResponse,
  RecallServiceService,
  StreamKind,
} from "../src/gen/cairn/v1/recall.js";
import { EventType, StateServiceService, WatchAgentResponse } from "../src/gen/cairn/v1/state.js";

type Handler = grpc.UntypedHandleCall;

const received: { method: string; authorization: string[]; deadline: number; request: any }[] = [];
let cancelledWatches = 0;

function seen(
  method: string,
  call: grpc.ServerUnaryCall<any, any> | grpc.ServerWritableStream<any, any>,
): void {
  const deadline = call.getDeadline();
  received.push({
    method,
    authorization: call.metadata.get("authorization").map(String),
    deadline: deadline instanceof Date ? deadline.getTime() : Number(deadline),
    request: call.request,
  });
}

/** A google.rpc.Status with a BadRequest naming two fields, and an unrelated detail. */
function badRequestStatus(): Buffer {
  const LD = WireType.LengthDelimited;
  const violation = (field: string, description: string) =>
    new BinaryWriter().tag(1, LD).string(field).tag(2, LD).string(description).finish();
  const badRequest = new BinaryWriter()
    .tag(1, LD)
    .bytes(violation("entry.content", "must not be empty"))
    .tag(1, LD)
    .bytes(violation("entry.tags[2]", "must be 1-100 printable characters"))
    .finish();
  const any = (typeUrl: string, value: Uint8Array) =>
    new BinaryWriter().tag(1, LD).string(typeUrl).tag(2, LD).bytes(value).finish();
  const status = new BinaryWriter()
    .tag(1, WireType.Varint)
    .int32(Status.INVALID_ARGUMENT)
    .tag(2, LD)
    .string("entry.content must not be empty")
    .tag(3, LD)
    .bytes(any("type.googleapis.com/google.rpc.DebugInfo", new Uint8Array([10, 1, 120])))
    .tag(3, LD)
    .bytes(any("type.googleapis.com/google.rpc.BadRequest", badRequest))
    .finish();
  return Buffer.from(status);
}

const recallHandlers: Record<string, Handler> = {
  write: (call: grpc.ServerUnaryCall<any, any>, callback: grpc.sendUnaryData<any>) => {
    seen("write", call);
    const metadata = new grpc.Metadata();
    metadata.set("grpc-status-details-bin", badRequestStatus());
    callback({
      code: Status.INVALID_ARGUMENT,
      details: "entry.content must not be empty",
      metadata,
    });
  },
  getStream: (call: grpc.ServerUnaryCall<any, any>, callback: grpc.sendUnaryData<any>) => {
    seen("getStream", call);
    if (call.request.streamId === "missing") {
      callback({ code: Status.NOT_FOUND, details: "no stream 'missing' in tenant 'acme'" });
      return;
    }
    if (call.request.streamId === "slow") return; // never answers: the deadline must end it
    callback(
      null,
      GetStreamResponse.fromPartial({
        stream: { id: call.request.streamId, kind: StreamKind.STREAM_KIND_ARCHIVAL, size: 7n },
      }),
    );
  },
  getInclusionProof: (call: grpc.ServerUnaryCall<any, any>, callback: grpc.sendUnaryData<any>) => {
    seen("getInclusionProof", call);
    callback(
      null,
      GetInclusionProofResponse.fromPartial({
        leafIndex: call.request.seq - 1n,
        treeSize: 2n ** 60n,
        proof: [Buffer.alloc(32, 1)],
      }),
    );
  },
};

const stateHandlers: Record<string, Handler> = {
  watchAgent: (call: grpc.ServerWritableStream<any, any>) => {
    seen("watchAgent", call);
    if (call.request.agentId === "gone") {
      call.emit("error", { code: Status.NOT_FOUND, details: "agent 'gone' was deleted" });
      return;
    }
    call.on("cancelled", () => (cancelledWatches += 1));
    const event = WatchAgentResponse.fromPartial;
    call.write(event({ type: EventType.EVENT_TYPE_WATCH_STARTED, agentId: call.request.agentId }));
    call.write(event({ type: EventType.EVENT_TYPE_BLOCK_UPDATED, blockId: "block-1" }));
    call.write(event({ type: EventType.EVENT_TYPE_PROMPT_REBUILT, promptHash: "ab" }));
    // ... and stays open, as a watch does.
  },
};

let server: grpc.Server;
let address: string;

before(async () => {
  server = new grpc.Server();
  server.addService(RecallServiceService, recallHandlers);
  server.addService(StateServiceService, stateHandlers);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (error, bound) =>
      error ? reject(error) : resolve(bound),
    ),
  );
  address = `127.0.0.1:${port}`;
});

after(() => {
  server.forceShutdown();
});

function last(method: string) {
  const call = received.filter((r) => r.method === method).at(-1);
  assert.ok(call, `the server saw no ${method}`);
  return call;
}

describe("unary calls", () => {
  test("every call carries the API key as a bearer token", async () => {
    const recall = connectRecall(address, { apiKey: "ck_test_key" });
    const reply = await recall.getStream({ streamId: "s-1" });
    assert.equal(reply.stream?.id, "s-1");
    assert.equal(reply.stream?.size, 7n);
    assert.deepEqual(last("getStream").authorization, ["Bearer ck_test_key"]);
    await recall.getStream({ streamId: "s-2" });
    assert.deepEqual(last("getStream").authorization, ["Bearer ck_test_key"]);
    recall.close();
  });

  test("without a key no authorization is sent; a caller's own one wins", async () => {
    const anonymous = connectRecall(address);
    await anonymous.getStream({ streamId: "s-1" });
    assert.deepEqual(last("getStream").authorization, []);
    const keyed = connectRecall(address, { apiKey: "ck_default" });
    await keyed.getStream({ streamId: "s-1" }, { metadata: { authorization: "Bearer ck_other" } });
    assert.deepEqual(last("getStream").authorization, ["Bearer ck_other"]);
    anonymous.close();
    keyed.close();
  });

  test("a partial request is sent with protobuf defaults elsewhere and int64 exact", async () => {
    const recall = connectRecall(address);
    const reply = await recall.getInclusionProof({ streamId: "s", seq: 2n ** 53n + 1n });
    assert.deepEqual(last("getInclusionProof").request, {
      streamId: "s",
      seq: 2n ** 53n + 1n,
      treeSize: 0n,
    });
    assert.equal(reply.leafIndex, 2n ** 53n);
    assert.equal(reply.treeSize, 2n ** 60n);
    assert.deepEqual(reply.proof, [Buffer.alloc(32, 1)]);
    recall.close();
  });

  test("unary calls get the default deadline of 30 s, or the client's, or the call's", async () => {
    const plain = connectRecall(address);
    let start = Date.now();
    await plain.getStream({ streamId: "s" });
    assert.ok(Math.abs(last("getStream").deadline - (start + 30_000)) < 2_000);
    const quick = connectRecall(address, { deadlineMs: 5_000 });
    start = Date.now();
    await quick.getStream({ streamId: "s" });
    assert.ok(Math.abs(last("getStream").deadline - (start + 5_000)) < 2_000);
    start = Date.now();
    await quick.getStream({ streamId: "s" }, { deadlineMs: 60_000 });
    assert.ok(Math.abs(last("getStream").deadline - (start + 60_000)) < 2_000);
    plain.close();
    quick.close();
  });

  test("a call past its deadline fails with DEADLINE_EXCEEDED", async () => {
    const recall = connectRecall(address, { deadlineMs: 150 });
    const start = Date.now();
    await assert.rejects(recall.getStream({ streamId: "slow" }), (error: unknown) => {
      assert.ok(error instanceof CairnError);
      assert.equal(error.code, Status.DEADLINE_EXCEEDED);
      assert.equal(error.codeName, "DEADLINE_EXCEEDED");
      assert.equal(error.method, "cairn.v1.RecallService/GetStream");
      return true;
    });
    assert.ok(Date.now() - start < 5_000);
    recall.close();
  });

  test("a server error surfaces with its gRPC code and message", async () => {
    const recall = connectRecall(address, { apiKey: "ck_test_key" });
    await assert.rejects(recall.getStream({ streamId: "missing" }), (error: unknown) => {
      assert.ok(error instanceof CairnError);
      assert.equal(error.code, Status.NOT_FOUND);
      assert.equal(error.details, "no stream 'missing' in tenant 'acme'");
      assert.equal(
        error.message,
        "cairn.v1.RecallService/GetStream: NOT_FOUND: no stream 'missing' in tenant 'acme'",
      );
      return true;
    });
    recall.close();
  });

  test("INVALID_ARGUMENT names each bad field from the BadRequest detail", async () => {
    const recall = connectRecall(address);
    await assert.rejects(recall.write({ streamId: "s", entry: {} }), (error: unknown) => {
      assert.ok(error instanceof CairnError);
      assert.equal(error.code, Status.INVALID_ARGUMENT);
      assert.deepEqual(error.fieldViolations, [
        { field: "entry.content", description: "must not be empty" },
        { field: "entry.tags[2]", description: "must be 1-100 printable characters" },
      ]);
      return true;
    });
    await assert.rejects(recall.getStream({ streamId: "missing" }), { fieldViolations: [] });
    recall.close();
  });

  test("an RPC the server does not implement fails with UNIMPLEMENTED", async () => {
    const recall = connectRecall(address);
    await assert.rejects(recall.getPublicKey({}), { code: Status.UNIMPLEMENTED });
    recall.close();
  });

  test("an aborted call fails with CANCELLED", async () => {
    const recall = connectRecall(address);
    const abort = new AbortController();
    const pending = recall.getStream({ streamId: "slow" }, { signal: abort.signal });
    setTimeout(() => abort.abort(), 50);
    await assert.rejects(pending, { name: "CairnError", code: Status.CANCELLED });
    recall.close();
  });

  test("nobody listening is UNAVAILABLE", async () => {
    const nowhere = connectRecall("127.0.0.1:1", { deadlineMs: 5_000 });
    await assert.rejects(nowhere.getStream({ streamId: "s" }), { code: Status.UNAVAILABLE });
    nowhere.close();
  });
});

describe("server streams", () => {
  test("a watch yields events until the loop breaks, which cancels the call", async () => {
    const cairn = connect({ state: address, recall: address }, { apiKey: "ck_watch" });
    const types: EventType[] = [];
    for await (const event of cairn.state.watchAgent({ agentId: "agent-1" })) {
      types.push(event.type);
      if (types.length === 3) break;
    }
    assert.deepEqual(types, [
      EventType.EVENT_TYPE_WATCH_STARTED,
      EventType.EVENT_TYPE_BLOCK_UPDATED,
      EventType.EVENT_TYPE_PROMPT_REBUILT,
    ]);
    assert.deepEqual(last("watchAgent").authorization, ["Bearer ck_watch"]);
    assert.equal(last("watchAgent").deadline, Infinity); // streams have no default deadline
    for (let i = 0; i < 50 && cancelledWatches === 0; i++)
      await new Promise((r) => setTimeout(r, 10));
    assert.equal(cancelledWatches, 1);
    cairn.close();
  });

  test("an error that arrives before iteration starts is raised by it", async () => {
    const state = connectState(address);
    const events = state.watchAgent({ agentId: "gone" });
    await new Promise((resolve) => setTimeout(resolve, 200)); // the status has arrived by now
    await assert.rejects(
      async () => {
        for await (const _ of events) {
          // no events
        }
      },
      { name: "CairnError", code: Status.NOT_FOUND },
    );
    state.close();
  });

  test("a call whose signal is already aborted is CANCELLED", async () => {
    const recall = connectRecall(address);
    await assert.rejects(recall.getStream({ streamId: "s" }, { signal: AbortSignal.abort() }), {
      code: Status.CANCELLED,
    });
    recall.close();
  });

  test("a stream that ends with an error raises it with its code", async () => {
    const state = connectState(address);
    const iterate = async () => {
      for await (const _ of state.watchAgent({ agentId: "gone" })) {
        // no events
      }
    };
    await assert.rejects(iterate(), {
      name: "CairnError",
      code: Status.NOT_FOUND,
      message: "cairn.v1.StateService/WatchAgent: NOT_FOUND: agent 'gone' was deleted",
    });
    state.close();
  });
});
