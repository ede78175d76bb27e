// Shared test harness for the integration tests: servers on 127.0.0.1 port 0, temporary copies of
// the example model repository, tensor encoders and a bounded wait on observable conditions.

import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type Client, type Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { GRPCInferenceService, type InferParameter } from "@galley/proto";
import { createAsyncQueue } from "../../src/base/async-queue.js";
import { createLogger, createServer, type GalleyServer, type Logger, type ServerOptions } from "../../src/index.js";

/** The example model repository (PROTOCOL.md §11.1 models). */
export const EXAMPLES = fileURLToPath(new URL("../../../../examples/model_repository", import.meta.url));

/** The built CLI (the ONNX worker loads from dist/, so the build must exist). */
export const CLI = fileURLToPath(new URL("../../dist/cli/galley.js", import.meta.url));

/** A logger that prints warnings and errors only. */
export function quietLog(): Logger {
  return createLogger({ info: false });
}

/** A logger that keeps every line (info included) in memory and prints nothing. */
export function recordingLog(): { log: Logger; lines: string[] } {
  const lines: string[] = [];
  return { log: createLogger({ write: (line) => lines.push(line) }), lines };
}

export type InferenceClient = Client<typeof GRPCInferenceService>;

/** A started server and clients for it. */
export interface Running {
  server: GalleyServer;
  /** `http://127.0.0.1:<grpc port>` (gRPC, gRPC-Web and Connect). */
  grpcUrl: string;
  grpcPort: number;
  httpUrl?: string;
  metricsUrl?: string;
  failedModels: string[];
  /** A Connect client speaking gRPC to the server. */
  client: InferenceClient;
  close(): Promise<void>;
}

const running = new Set<Running>();
const folders = new Set<string>();

type Endpoint<K extends "http" | "grpc" | "metrics"> = Exclude<ServerOptions[K], false | undefined>;

/** Endpoint options on 127.0.0.1 port 0, or false. */
function endpoint<T extends { port: number }>(value: boolean | Partial<T> | undefined): T | false {
  if (value === undefined || value === false) return false;
  return { host: "127.0.0.1", port: 0, ...(value === true ? {} : value) } as unknown as T;
}

/**
 * Create and start a server. Defaults: the example repository, gRPC only on 127.0.0.1:0, a quiet
 * logger, a 5 s exit timeout. `http: true` / `metrics: true` (or endpoint options) enable those
 * on 127.0.0.1:0 too.
 */
export async function startServer(
  options: Omit<ServerOptions, "http" | "metrics" | "grpc"> & {
    http?: boolean | Partial<Endpoint<"http">>;
    metrics?: boolean | Partial<Endpoint<"metrics">>;
    grpc?: Partial<Endpoint<"grpc">>;
  } = {},
): Promise<Running> {
  const server = createServer({
    modelRepositories: [EXAMPLES],
    log: quietLog(),
    // Short, so that a failed test cannot hold its server open for Triton's 30 s.
    exitTimeoutSecs: 5,
    ...options,
    http: endpoint<Endpoint<"http">>(options.http),
    metrics: endpoint<Endpoint<"metrics">>(options.metrics),
    grpc: endpoint<Endpoint<"grpc">>(options.grpc ?? true),
  });
  const addresses = await server.listen();
  const grpcPort = addresses.grpc?.port ?? 0;
  const grpcUrl = `http://127.0.0.1:${grpcPort}`;
  let closed: Promise<void> | undefined;
  const handle: Running = {
    server,
    grpcUrl,
    grpcPort,
    ...(addresses.http ? { httpUrl: `http://127.0.0.1:${addresses.http.port}` } : {}),
    ...(addresses.metrics ? { metricsUrl: `http://127.0.0.1:${addresses.metrics.port}` } : {}),
    failedModels: addresses.failedModels,
    client: createClient(GRPCInferenceService, createGrpcTransport({ baseUrl: grpcUrl })),
    close() {
      running.delete(handle);
      closed ??= server.close();
      return closed;
    },
  };
  running.add(handle);
  return handle;
}

/** Close every server started by {@link startServer} and remove every temporary repository. */
export async function cleanup(): Promise<void> {
  await Promise.all([...running].map((r) => r.close()));
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
  folders.clear();
}

/** A new temporary folder holding copies of the named example models. */
export function tempRepository(models: readonly string[] = []): string {
  const repo = mkdtempSync(join(tmpdir(), "galley-test-repo-"));
  folders.add(repo);
  for (const model of models) copyModel(model, repo);
  return repo;
}

/** Copy one example model (or `source` folder) into `repo` as `name`. */
export function copyModel(model: string, repo: string, name = model): string {
  const target = join(repo, name);
  cpSync(join(EXAMPLES, model), target, { recursive: true });
  return target;
}

/**
 * Wait until `condition` holds, re-checking every `intervalMs` for at most `timeoutMs`: waiting on
 * an observable condition, never a fixed sleep. Resolves with the condition's truthy value.
 */
export async function waitFor<T>(
  condition: () => T | Promise<T>,
  {
    timeoutMs = 20_000,
    intervalMs = 25,
    what = "condition",
  }: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await condition();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

// ---- tensors ----

/** INT32 values as little-endian bytes. */
export function int32Bytes(values: readonly number[]): Uint8Array {
  const out = new Uint8Array(values.length * 4);
  const view = new DataView(out.buffer);
  for (const [i, v] of values.entries()) view.setInt32(i * 4, v, true);
  return out;
}

/** Little-endian bytes as INT32 values. */
export function readInt32(bytes: Uint8Array | undefined): number[] {
  if (!bytes) throw new Error("no data");
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return Array.from({ length: bytes.byteLength / 4 }, (_, i) => view.getInt32(i * 4, true));
}

/** INT8 values as bytes. */
export function int8Bytes(values: readonly number[]): Uint8Array {
  return new Uint8Array(Int8Array.from(values).buffer);
}

/** Bytes as INT8 values. */
export function readInt8(bytes: Uint8Array | undefined): number[] {
  if (!bytes) throw new Error("no data");
  return [...new Int8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength)];
}

/** FP32 values as little-endian bytes. */
export function fp32Bytes(values: readonly number[]): Uint8Array {
  const out = new Uint8Array(values.length * 4);
  const view = new DataView(out.buffer);
  for (const [i, v] of values.entries()) view.setFloat32(i * 4, v, true);
  return out;
}

/** Little-endian bytes as FP32 values. */
export function readFp32(bytes: Uint8Array | undefined): number[] {
  if (!bytes) throw new Error("no data");
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return Array.from({ length: bytes.byteLength / 4 }, (_, i) => view.getFloat32(i * 4, true));
}

/** BYTES elements, each with its 4-byte little-endian length prefix. */
export function bytesTensor(elements: readonly (string | Uint8Array)[]): Uint8Array {
  const encoded = elements.map((e) => (typeof e === "string" ? new TextEncoder().encode(e) : e));
  const out = new Uint8Array(encoded.reduce((n, e) => n + 4 + e.byteLength, 0));
  const view = new DataView(out.buffer);
  let at = 0;
  for (const e of encoded) {
    view.setUint32(at, e.byteLength, true);
    out.set(e, at + 4);
    at += 4 + e.byteLength;
  }
  return out;
}

/** A BYTES tensor's elements as strings. */
export function readBytesTensor(bytes: Uint8Array | undefined): string[] {
  if (!bytes) throw new Error("no data");
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out: string[] = [];
  for (let at = 0; at + 4 <= bytes.byteLength; ) {
    const length = view.getUint32(at, true);
    out.push(new TextDecoder().decode(bytes.subarray(at + 4, at + 4 + length)));
    at += 4 + length;
  }
  return out;
}

/** 0..n-1. */
export function range(n: number, start = 0): number[] {
  return Array.from({ length: n }, (_, i) => start + i);
}

/**
 * A ModelInfer request for `simple` (INT32 [batch,16] add/sub) with raw contents: INPUT0 =
 * `a`, INPUT1 = `b`, each of `16 * batch` values.
 */
export function simpleRequest(a: readonly number[], b: readonly number[], extra: { id?: string } = {}) {
  const batch = BigInt(a.length / 16);
  return {
    modelName: "simple",
    ...(extra.id !== undefined ? { id: extra.id } : {}),
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: [batch, 16n] },
      { name: "INPUT1", datatype: "INT32", shape: [batch, 16n] },
    ],
    rawInputContents: [int32Bytes(a), int32Bytes(b)],
  };
}

// ---- calls ----

/** The ConnectError a call fails with; throws if the call succeeds or fails with something else. */
export async function grpcFailure(call: Promise<unknown>): Promise<ConnectError> {
  try {
    await call;
  } catch (error) {
    if (error instanceof ConnectError) return error;
    throw error;
  }
  throw new Error("expected the call to fail, but it succeeded");
}

/** Expect a call to fail with `code` and, when given, exactly `message` (or a match of the RegExp). */
export async function expectGrpcError(
  call: Promise<unknown>,
  code: Code,
  message?: string | RegExp,
): Promise<ConnectError> {
  const error = await grpcFailure(call);
  if (error.code !== code || (message !== undefined && !matches(error.rawMessage, message))) {
    throw new Error(
      `expected code ${code}${message !== undefined ? ` with message ${String(message)}` : ""}, got code ${error.code}: ${error.rawMessage}`,
    );
  }
  return error;
}

function matches(text: string, expected: string | RegExp): boolean {
  return typeof expected === "string" ? text === expected : expected.test(text);
}

/** An async iterable fed by `push` and closed by `end`: the request side of a streaming call. */
export function pushable<T>(): AsyncIterable<T> & { push(value: T): void; end(): void } {
  return createAsyncQueue<T>();
}

/** The gRPC parameters of one request of a sequence: `sequence_id` (integer or string), `sequence_start`, `sequence_end`. */
export function sequenceParameters(id: bigint | string, start: boolean, end: boolean): Record<string, InferParameter> {
  const flag = (value: boolean) => ({ parameterChoice: { case: "boolParam", value } }) as InferParameter;
  return {
    sequence_id: {
      parameterChoice: typeof id === "string" ? { case: "stringParam", value: id } : { case: "int64Param", value: id },
    } as InferParameter,
    sequence_start: flag(start),
    sequence_end: flag(end),
  };
}
