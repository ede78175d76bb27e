// Helpers for the REST frontend tests: servers on 127.0.0.1 port 0, raw HTTP requests (bodies
// and headers exactly as given, answers as bytes), binary-tensor bodies and temporary repositories.
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { Agent, type IncomingHttpHeaders, request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { HttpFrontendOptions } from "../src/frontend/http/rest-frontend.js";
import { createLogger, createServer, type GalleyServer, type ServerOptions } from "../src/index.js";

/** The example model repository. */
export const EXAMPLES = fileURLToPath(new URL("../../../examples/model_repository", import.meta.url));

export interface HttpServer {
  server: GalleyServer;
  port: number;
  base: string;
  close(): Promise<void>;
}

/** Start a server with only the REST frontend, on 127.0.0.1 and a free port. */
export async function startHttp(
  options: Omit<ServerOptions, "http" | "grpc" | "metrics"> & { http?: HttpFrontendOptions } = {},
): Promise<HttpServer> {
  const server = createServer({
    modelRepositories: [EXAMPLES],
    log: createLogger({ info: false, warning: false, error: false }),
    exitTimeoutSecs: 5,
    ...options,
    http: { host: "127.0.0.1", port: 0, ...options.http },
    grpc: false,
    metrics: false,
  });
  const { http } = await server.listen();
  const port = http?.port ?? 0;
  return { server, port, base: `http://127.0.0.1:${port}`, close: () => server.close() };
}

/** A reply: status, headers, and the body as bytes and text. */
export interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  text: string;
  /** The body parsed as JSON (throws if it is not). */
  json(): unknown;
}

const agent = new Agent({ keepAlive: true });

/** Send one request with node:http (the body as given, no content type added). */
export function send(
  port: number,
  method: string,
  path: string,
  body?: string | Uint8Array,
  headers: Record<string, string | number> = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, method, path, headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => {
        const bytes = Buffer.concat(chunks);
        const text = bytes.toString("latin1");
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: bytes, text, json: () => JSON.parse(text) });
      });
      res.on("error", reject);
    });
    req.on("error", reject);
    if (body !== undefined) req.end(body);
    else req.end();
  });
}

/** POST a JSON body (serialized with JSON.stringify unless already a string). */
export function postJson(port: number, path: string, body: unknown, headers: Record<string, string> = {}) {
  return send(port, "POST", path, typeof body === "string" ? body : JSON.stringify(body), headers);
}

/** A binary-tensor body: the JSON header, then the blobs; and the header length. */
export function binaryBody(header: unknown, blobs: readonly Uint8Array[]): { body: Buffer; headerLength: number } {
  const json = Buffer.from(JSON.stringify(header));
  return { body: Buffer.concat([json, ...blobs]), headerLength: json.length };
}

/** POST a binary-tensor request. */
export function postBinary(
  port: number,
  path: string,
  header: unknown,
  blobs: readonly Uint8Array[],
  headers: Record<string, string> = {},
) {
  const { body, headerLength } = binaryBody(header, blobs);
  return send(port, "POST", path, body, { "Inference-Header-Content-Length": String(headerLength), ...headers });
}

/** Split a binary reply into its JSON header and the bytes after it. */
export function splitBinary(answer: Answer): { header: { outputs: Output[] } & Record<string, unknown>; rest: Buffer } {
  const length = Number(answer.headers["inference-header-content-length"]);
  return { header: JSON.parse(answer.body.subarray(0, length).toString()), rest: answer.body.subarray(length) };
}

export interface Output {
  name: string;
  datatype: string;
  shape: number[];
  data?: unknown[];
  parameters?: { binary_data_size: number };
}

export function int32Bytes(values: readonly number[]): Uint8Array {
  return new Uint8Array(Int32Array.from(values).buffer);
}

export function readInt32(bytes: Uint8Array): number[] {
  return [...new Int32Array(new Uint8Array(bytes).buffer)];
}

export function fp32Bytes(values: readonly number[]): Uint8Array {
  return new Uint8Array(Float32Array.from(values).buffer);
}

export function readFp32(bytes: Uint8Array): number[] {
  return [...new Float32Array(new Uint8Array(bytes).buffer)];
}

/** BYTES elements with their 4-byte little-endian length prefixes. */
export function bytesTensor(elements: readonly string[]): Uint8Array {
  return Buffer.concat(
    elements.flatMap((e) => {
      const bytes = Buffer.from(e);
      const length = Buffer.alloc(4);
      length.writeUInt32LE(bytes.length);
      return [length, bytes];
    }),
  );
}

export function readBytesTensor(bytes: Uint8Array): string[] {
  const out: string[] = [];
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let at = 0; at < buffer.length; ) {
    const length = buffer.readUInt32LE(at);
    out.push(buffer.subarray(at + 4, at + 4 + length).toString());
    at += 4 + length;
  }
  return out;
}

const folders: string[] = [];

/** A temporary repository holding copies of the named example models. */
export function tempRepository(models: readonly string[]): string {
  const repo = mkdtempSync(join(tmpdir(), "galley-http-test-"));
  folders.push(repo);
  for (const model of models) cpSync(join(EXAMPLES, model), join(repo, model), { recursive: true });
  return repo;
}

/** Remove the temporary repositories. */
export function removeTempRepositories(): void {
  for (const folder of folders.splice(0)) rmSync(folder, { recursive: true, force: true });
}

/** 0..15, the `simple` examples' input. */
export const SIXTEEN = Array.from({ length: 16 }, (_, i) => i);

/** JSON inputs for `simple` (INT32 [1,16] each). */
export function simpleInputs(a: readonly number[] = SIXTEEN, b: readonly number[] = SIXTEEN) {
  return [
    { name: "INPUT0", shape: [1, 16], datatype: "INT32", data: a },
    { name: "INPUT1", shape: [1, 16], datatype: "INT32", data: b },
  ];
}
