// A lean KServe v2 client for the binary tensor extension (PROTOCOL.md §1.5) over keep-alive node:http,
// for any model: the JSON header is built once per request shape, the blobs are appended per call.
import { Agent, request } from "node:http";

export interface BinaryInput {
  name: string;
  datatype: string;
  shape: number[];
}

/** A request shape (model, inputs, requested outputs) whose JSON header is built once. */
export interface BinaryRequest {
  path: string;
  header: Buffer;
}

export function binaryRequest(
  model: string,
  inputs: BinaryInput[],
  outputs: string[],
  blobBytes: number[],
): BinaryRequest {
  const header = Buffer.from(
    JSON.stringify({
      inputs: inputs.map((input, i) => ({ ...input, parameters: { binary_data_size: blobBytes[i] } })),
      outputs: outputs.map((name) => ({ name, parameters: { binary_data: true } })),
    }),
  );
  return { path: `/v2/models/${model}/infer`, header };
}

export function keepAlive(sockets: number): Agent {
  return new Agent({ keepAlive: true, maxSockets: sockets });
}

/** One call; resolves with each output's bytes (views into the reply body). */
export function inferBinary(
  agent: Agent,
  port: number,
  req: BinaryRequest,
  blobs: readonly Uint8Array[],
): Promise<Record<string, Buffer>> {
  const body = Buffer.concat([req.header, ...blobs]);
  const headers = {
    "content-type": "application/octet-stream",
    "content-length": body.byteLength,
    "inference-header-content-length": req.header.byteLength,
  };
  return new Promise((resolve, reject) => {
    const call = request({ agent, host: "127.0.0.1", port, method: "POST", path: req.path, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("error", reject);
      res.on("end", () => {
        const reply = Buffer.concat(chunks);
        if (res.statusCode !== 200) {
          reject(new Error(`HTTP ${res.statusCode}: ${reply.toString("utf8", 0, Math.min(reply.byteLength, 300))}`));
          return;
        }
        const jsonLength = Number(res.headers["inference-header-content-length"]);
        if (!Number.isInteger(jsonLength)) return reject(new Error("reply without Inference-Header-Content-Length"));
        const header = JSON.parse(reply.toString("utf8", 0, jsonLength)) as {
          outputs: { name: string; parameters?: { binary_data_size?: number } }[];
        };
        const outputs: Record<string, Buffer> = {};
        let at = jsonLength;
        for (const output of header.outputs) {
          const size = output.parameters?.binary_data_size ?? 0;
          outputs[output.name] = reply.subarray(at, at + size);
          at += size;
        }
        resolve(outputs);
      });
    });
    call.on("error", reject);
    call.end(body);
  });
}

/** Little-endian bytes as float32 / int32 values, copied (the view may be unaligned). */
export function float32s(bytes: Uint8Array): Float32Array {
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return new Float32Array(copy.buffer);
}

export function bytesOf(values: Float32Array | Int32Array): Uint8Array {
  return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
}
