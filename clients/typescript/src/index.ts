/**
 * Cairn's TypeScript client.
 *
 * - `connect`, `connectState`, `connectRecall`: typed calls with an API key and deadlines
 *   (`./client.ts`).
 * - `verifyInclusion`, `verifyCheckpoint`, `verifyRecords`, ...: check what the recall service
 *   returns without trusting it (`./verify.ts`).
 * - `common`, `state`, `recall`: the generated messages, enums and grpc-js clients
 *   (`./gen/cairn/v1/`).
 */

export * from "./client.js";
export * from "./verify.js";
export * as common from "./gen/cairn/v1/common.js";
export * as recall from "./gen/cairn/v1/recall.js";
export * as state from "./gen/cairn/v1/state.js";
