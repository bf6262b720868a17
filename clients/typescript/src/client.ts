/**
 * A thin typed client for Cairn's two gRPC services, over `@grpc/grpc-js`.
 *
 *     const cairn = connect({ state: "127.0.0.1:50051", recall: "127.0.0.1:50052" }, { apiKey });
 *     const { agent } = await cairn.state.createAgent({ name: "planner", memoryBlocks: [...] });
 *     for await (const event of cairn.state.watchAgent({ agentId: agent!.id })) { ... }
 *     cairn.close();
 *
 * Every RPC of the contract is a method named after it (camelCase), typed from the generated
 * definitions in `src/gen/`: it takes a partial request (unset fields are protobuf defaults)
 * and resolves to the response message. Each call carries `authorization: Bearer <api key>`
 * and, when unary, a deadline (30 s unless told otherwise). A failed call rejects with a
 * `CairnError` carrying the gRPC status code and the server's message.
 */

import * as grpc from "@grpc/grpc-js";

import { type Tls, channelSettings } from "./channels.js";
import { RecallServiceDefinition } from "./gen/cairn/v1/recall.js";
import { StateServiceDefinition } from "./gen/cairn/v1/state.js";
import { type FieldViolation, fieldViolationsFromTrailers } from "./status_details.js";

export { type Tls, type TlsOptions, isLoopback, usesTls } from "./channels.js";
export type { FieldViolation } from "./status_details.js";

/** gRPC status codes (`Status.NOT_FOUND`, ...), to compare with `CairnError.code`. */
export const Status = grpc.status;
export type Status = grpc.status;

/** The deadline of unary calls unless `ConnectOptions.deadlineMs` says otherwise. */
export const DEFAULT_DEADLINE_MS = 30_000;

/** How to reach a service. */
export interface ConnectOptions {
  /** Sent as `authorization: Bearer <key>` on every call; omit for `--insecure-local`. */
  apiKey?: string;
  /**
   * TLS, by default to every address but a loopback one (127.0.0.0/8, ::1, localhost), where
   * the servers' plaintext default is used. `false` forces plaintext; `true` is TLS with the
   * system's roots; an object gives PEM roots (e.g. for a self-signed server certificate), a
   * client certificate, and the name the server's certificate was issued for.
   */
  tls?: Tls;
  /** Deadline of each unary call, in milliseconds (default 30000). Streams have none. */
  deadlineMs?: number;
  /** Further grpc-js channel options (message sizes, keepalive, ...). */
  channelOptions?: grpc.ChannelOptions;
}

/** Per-call options. */
export interface CallOptions {
  /** This call's deadline, in milliseconds from now; overrides the client's default. */
  deadlineMs?: number;
  /** Extra request metadata (the API key is added unless `authorization` is given). */
  metadata?: Record<string, string>;
  /** Cancels the call; it then fails with `Status.CANCELLED`. */
  signal?: AbortSignal;
}

/**
 * A failed call: the gRPC status code, its name, the server's message, and for
 * INVALID_ARGUMENT the fields the server named.
 */
export class CairnError extends Error {
  /** The gRPC status code, e.g. `Status.NOT_FOUND`. */
  readonly code: Status;
  /** The code's name, e.g. `NOT_FOUND`. */
  readonly codeName: string;
  /** The server's message, for a person. */
  readonly details: string;
  /** The RPC, e.g. `cairn.v1.StateService/GetAgent`. */
  readonly method: string;
  /** Each malformed request field (INVALID_ARGUMENT), from the `google.rpc.BadRequest` detail. */
  readonly fieldViolations: FieldViolation[];
  /** Trailing metadata; a `google.rpc.Status` with details is in `grpc-status-details-bin`. */
  readonly metadata: grpc.Metadata;

  constructor(method: string, code: Status, details: string, metadata: grpc.Metadata) {
    const codeName = grpc.status[code] ?? `CODE_${code}`;
    super(`${method}: ${codeName}: ${details}`);
    this.name = "CairnError";
    this.method = method;
    this.code = code;
    this.codeName = codeName;
    this.details = details;
    this.fieldViolations = fieldViolationsFromTrailers((key) => metadata.get(key));
    this.metadata = metadata;
  }
}

/** A server stream: iterate it; breaking out of the loop or `cancel()` ends the call. */
export interface CallStream<T> extends AsyncIterable<T> {
  cancel(): void;
}

// What src/client.ts needs of a generated (ts-proto `generic-definitions`) service.
interface MessageFns<T> {
  encode(message: T): { finish(): Uint8Array };
  decode(input: Uint8Array): T;
  fromPartial(object: never): T;
}
interface MethodDefinition {
  readonly name: string;
  readonly requestType: MessageFns<unknown>;
  readonly responseType: MessageFns<unknown>;
  readonly requestStream: boolean;
  readonly responseStream: boolean;
}
interface ServiceDefinition {
  readonly fullName: string;
  readonly methods: { readonly [name: string]: MethodDefinition };
}

type RequestOf<M> = M extends { requestType: { fromPartial(object: infer P): unknown } }
  ? P
  : never;
type ResponseOf<M> = M extends { responseType: { decode(input: never): infer R } } ? R : never;

/** A unary RPC: a partial request in, the response out. */
export type UnaryMethod<M> = (
  request: RequestOf<M>,
  options?: CallOptions,
) => Promise<ResponseOf<M>>;
/** A server-streaming RPC. */
export type StreamMethod<M> = (
  request: RequestOf<M>,
  options?: CallOptions,
) => CallStream<ResponseOf<M>>;

/** One method per RPC of service `D` (client- and bidi-streaming RPCs are not wrapped). */
export type ServiceClient<D extends ServiceDefinition> = {
  readonly [
    K in keyof D["methods"] as D["methods"][K]["requestStream"] extends true ? never : K
  ]: D["methods"][K]["responseStream"] extends true
    ? StreamMethod<D["methods"][K]>
    : UnaryMethod<D["methods"][K]>;
} & {
  /** The grpc-js client underneath (its channel, `waitForReady`, ...). */
  readonly grpcClient: grpc.Client;
  /** Closes the channel; calls in flight fail with `Status.CANCELLED`. */
  close(): void;
};

/** The state service: agents, memory blocks, compiled prompts, steps. */
export type StateClient = ServiceClient<typeof StateServiceDefinition>;
/** The recall service: shared streams, proofs, signed checkpoints. */
export type RecallClient = ServiceClient<typeof RecallServiceDefinition>;

function errorOf(method: string, error: unknown): CairnError {
  if (error instanceof CairnError) return error;
  const e = error as Partial<grpc.ServiceError>;
  if (typeof e.code === "number") {
    return new CairnError(
      method,
      e.code,
      e.details ?? String(e.message),
      e.metadata ?? new grpc.Metadata(),
    );
  }
  return new CairnError(method, grpc.status.UNKNOWN, String(error), new grpc.Metadata());
}

function onAbort(signal: AbortSignal | undefined, cancel: () => void): void {
  if (signal?.aborted) cancel();
  else signal?.addEventListener("abort", cancel, { once: true });
}

/** Connects to one service described by a generated definition. */
export function connectService<D extends ServiceDefinition>(
  definition: D,
  address: string,
  options: ConnectOptions = {},
): ServiceClient<D> {
  const transport = channelSettings(address, options.tls);
  const client = new grpc.Client(address, transport.credentials, {
    ...transport.options,
    ...options.channelOptions,
  });
  const defaultDeadlineMs = options.deadlineMs ?? DEFAULT_DEADLINE_MS;

  const metadataFor = (call: CallOptions): grpc.Metadata => {
    const metadata = new grpc.Metadata();
    for (const [key, value] of Object.entries(call.metadata ?? {})) metadata.set(key, value);
    if (options.apiKey && !metadata.get("authorization").length) {
      metadata.set("authorization", `Bearer ${options.apiKey}`);
    }
    return metadata;
  };

  const wrapped: Record<string, unknown> = {
    grpcClient: client,
    close: () => client.close(),
  };
  for (const [key, m] of Object.entries(definition.methods)) {
    if (m.requestStream) continue;
    const path = `/${definition.fullName}/${m.name}`;
    const method = path.slice(1);
    const serialize = (request: unknown): Buffer =>
      Buffer.from(m.requestType.encode(m.requestType.fromPartial(request as never)).finish());
    const deserialize = (bytes: Buffer): unknown => m.responseType.decode(bytes);

    if (m.responseStream) {
      wrapped[key] = (request: unknown, call: CallOptions = {}): CallStream<unknown> => {
        const deadline = call.deadlineMs === undefined ? undefined : Date.now() + call.deadlineMs;
        const stream = client.makeServerStreamRequest(
          path,
          serialize,
          deserialize,
          request,
          metadataFor(call),
          {
            deadline,
          },
        );
        onAbort(call.signal, () => stream.cancel());
        // Keep the first error even before (or without) iteration: grpc-js emits it once, and
        // an 'error' event without a listener would crash the process.
        let failure: unknown;
        stream.on("error", (error) => (failure ??= error));
        async function* messages(): AsyncGenerator<unknown> {
          try {
            for await (const message of stream) yield message;
            if (failure !== undefined) throw failure;
          } catch (error) {
            throw errorOf(method, error);
          } finally {
            stream.cancel();
          }
        }
        const iterator = messages();
        return { [Symbol.asyncIterator]: () => iterator, cancel: () => stream.cancel() };
      };
      continue;
    }

    wrapped[key] = (request: unknown, call: CallOptions = {}): Promise<unknown> =>
      new Promise((resolve, reject) => {
        const deadline = Date.now() + (call.deadlineMs ?? defaultDeadlineMs);
        const unary = client.makeUnaryRequest(
          path,
          serialize,
          deserialize,
          request,
          metadataFor(call),
          { deadline },
          (error, response) => (error ? reject(errorOf(method, error)) : resolve(response)),
        );
        onAbort(call.signal, () => unary.cancel());
      });
  }
  return wrapped as ServiceClient<D>;
}

/** Connects to a state service at `host:port`. */
export function connectState(address: string, options: ConnectOptions = {}): StateClient {
  return connectService(StateServiceDefinition, address, options);
}

/** Connects to a recall service at `host:port`. */
export function connectRecall(address: string, options: ConnectOptions = {}): RecallClient {
  return connectService(RecallServiceDefinition, address, options);
}

/** Both services, with one set of options. */
export interface Cairn {
  readonly state: StateClient;
  readonly recall: RecallClient;
  close(): void;
}

/** Connects to the state and recall services with one API key and one default deadline. */
export function connect(
  addresses: { state: string; recall: string },
  options: ConnectOptions = {},
): Cairn {
  const state = connectState(addresses.state, options);
  const recall = connectRecall(addresses.recall, options);
  return {
    state,
    recall,
    close: () => {
      state.close();
      recall.close();
    },
  };
}
