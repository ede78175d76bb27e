// The load generator written in C (h2load, Debian's nghttp2-client): requests of `simple` over
// HTTP/1.1 (KServe v2 JSON or binary, one connection per request in flight, as wrk) or gRPC
// (ModelInfer, one HTTP/2 connection carrying every request in flight, as perf_analyzer's one
// channel). Its own CPU is a fraction of a Node client's, so on this 2-vCPU VM the server, not
// the client, sets the request rate: a Node gRPC client costs more CPU per call than Galley's
// server does. h2load checks HTTP statuses only; a gRPC status travels in trailers, so callers
// check the server's own counts as well (ab-server.ts reads Galley's statistics).
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { create, toBinary } from "@bufbuild/protobuf";
import { ModelInferRequestSchema } from "@galley/proto";
import { binaryBody, bytesOf, jsonBody, workloadOf } from "./workload.js";

const run = promisify(execFile);

/** What h2load sends: a protocol to a port. */
export type H2loadTarget = { protocol: "json" | "binary" | "grpc"; port: number };

export interface H2loadResult {
  /** From h2load's own clock: first request to last response. */
  wallMs: number;
  /** Requests that did not end in HTTP 2xx, or did not end at all. */
  errors: number;
  firstError?: string;
}

/** The request bodies, written once to a folder of their own; `close` removes it. */
export function createH2load() {
  const workload = workloadOf();
  const dir = mkdtempSync(join(tmpdir(), "galley-h2load-"));
  const binary = binaryBody(workload);
  const message = toBinary(
    ModelInferRequestSchema,
    create(ModelInferRequestSchema, {
      modelName: workload.model,
      inputs: workload.inputs.map(({ name, datatype, shape }) => ({ name, datatype, shape: shape.map(BigInt) })),
      rawInputContents: workload.inputs.map(({ values }) => bytesOf(values)),
    }),
  );
  const frame = Buffer.alloc(5 + message.byteLength);
  frame.writeUInt32BE(message.byteLength, 1);
  frame.set(message, 5);
  const files = { json: join(dir, "json"), binary: join(dir, "binary"), grpc: join(dir, "grpc") };
  writeFileSync(files.json, jsonBody(workload));
  writeFileSync(files.binary, binary.body);
  writeFileSync(files.grpc, frame);

  const argsOf = (target: H2loadTarget, concurrency: number, requests: number): string[] => {
    const url = (path: string) => `http://127.0.0.1:${target.port}${path}`;
    const count = ["-n", String(requests)];
    // HTTP/1.1: a connection per request in flight.
    const h1 = (file: string, headers: string[]) => [
      "--h1",
      ...count,
      "-c",
      String(concurrency),
      "-d",
      file,
      ...headers.flatMap((h) => ["-H", h]),
      url(workload.path),
    ];
    switch (target.protocol) {
      case "json":
        return h1(files.json, ["content-type: application/json"]);
      case "binary":
        return h1(files.binary, [
          "content-type: application/octet-stream",
          `inference-header-content-length: ${binary.headerLength}`,
        ]);
      case "grpc":
        // One connection, every request in flight a stream on it.
        return [
          ...count,
          "-c",
          "1",
          "-m",
          String(concurrency),
          "-d",
          files.grpc,
          "-H",
          "content-type: application/grpc",
          "-H",
          "te: trailers",
          url("/inference.GRPCInferenceService/ModelInfer"),
        ];
    }
  };

  return {
    /** Exactly `requests` requests, `concurrency` in flight, back to back. */
    async load(target: H2loadTarget, concurrency: number, requests: number): Promise<H2loadResult> {
      let stdout: string;
      try {
        ({ stdout } = await run("h2load", argsOf(target, concurrency, requests), { maxBuffer: 1 << 20 }));
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code === "ENOENT") throw new Error("h2load is not installed: apt-get install nghttp2-client");
        throw error;
      }
      return parseH2load(stdout, requests);
    },
    close: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** h2load's summary: its wall time and how many of `requests` did not come back 2xx. */
export function parseH2load(stdout: string, requests: number): H2loadResult {
  const finished = /finished in ([\d.]+)(s|ms)/.exec(stdout);
  const ok = /status codes: (\d+) 2xx/.exec(stdout);
  if (!finished || !ok) return { wallMs: Number.NaN, errors: requests, firstError: stdout.slice(-500) };
  const wallMs = Number(finished[1]) * (finished[2] === "s" ? 1000 : 1);
  const errors = requests - Number(ok[1]);
  return { wallMs, errors, ...(errors > 0 ? { firstError: stdout.slice(-500) } : {}) };
}
