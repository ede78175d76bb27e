import { promisify } from "node:util";
import { gzip } from "node:zlib";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { elementType, ModelConfigSchema, ModelStatisticsResponseSchema } from "@galley/proto";
import type {
  CallOptions,
  InferenceClient,
  InferOptions,
  InferResult,
  ParameterValue,
  SharedMemoryPlacement,
} from "./client-types.js";
import {
  callSignals,
  checkTimeoutMs,
  inferResult,
  outputPlacement,
  outputPlacements,
  requestedOutputs,
  requestParameters,
  sharedMemoryParameters,
} from "./request-parts.js";
import { errorFromReply, type RestCall, restErrorFrom } from "./rest-error.js";
import { type DataType, encodeBytes, OutputTensor } from "./tensor.js";

const gzipAsync = promisify(gzip);
const utf8 = new TextDecoder();

/**
 * Parse a reply's JSON. Triton and Galley write non-finite FP32/FP64 values as the bare tokens
 * `NaN`, `Infinity` and `-Infinity` (rapidjson's relaxed syntax), which `JSON.parse` refuses. A
 * reply it refuses is read again with those tokens (outside strings) rewritten as values it takes:
 * `1e999` and `-1e999`, which it reads as the infinities, and for NaN a string holding a random
 * UUID drawn after the reply arrived, which a reviver turns back into NaN. Replies without the
 * tokens cost one `JSON.parse`, as before.
 */
function parseReply(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    const nan = crypto.randomUUID();
    let rewritten = "";
    let copied = 0;
    for (let at = 0; at < text.length; at++) {
      const c = text.charCodeAt(at);
      if (c === 0x22) {
        // Skip the string, escaped characters included, to its closing quote.
        for (at++; at < text.length && text.charCodeAt(at) !== 0x22; at++) if (text.charCodeAt(at) === 0x5c) at++;
        continue;
      }
      const token = c === 0x4e ? "NaN" : c === 0x49 ? "Infinity" : c === 0x2d ? "-Infinity" : undefined;
      if (token === undefined || !text.startsWith(token, at)) continue;
      rewritten += text.slice(copied, at) + (token === "NaN" ? `"${nan}"` : token === "Infinity" ? "1e999" : "-1e999");
      at += token.length - 1;
      copied = at + 1;
    }
    if (copied === 0) throw error;
    return JSON.parse(rewritten + text.slice(copied), (_, v: unknown) => (v === nan ? Number.NaN : v));
  }
}

/**
 * The message of a reply with an error status: its `{"error": ...}` text, else its body as it is
 * (a proxy's page, say, cut at 1000 characters), else its status text.
 */
function replyMessage(text: string, response: Response): string {
  try {
    const error = (parseReply(text) as { error?: unknown } | null)?.error;
    if (typeof error === "string") return error;
  } catch {
    // Not JSON: the text itself.
  }
  const body = text.length > 1000 ? `${text.slice(0, 1000)}...` : text;
  return body || `HTTP ${response.status} ${response.statusText}`.trim();
}

/** Options for {@link createRestClient}. */
export interface RestClientOptions {
  /** The server's HTTP origin, e.g. `http://localhost:8000`. */
  baseUrl: string;
  /**
   * Tensors as binary data (Triton's binary tensor extension; the default) or as JSON. Outputs
   * follow the same choice unless a requested output says otherwise.
   */
  binary?: boolean;
  /** Compress inference request bodies with gzip (responses are accepted compressed either way). */
  compression?: "gzip" | "none";
  /** Headers sent with every request (e.g. `--http-restricted-api` keys). */
  headers?: Record<string, string>;
  /** A deadline for every call, in ms, unless a call gives its own; default none. */
  defaultTimeoutMs?: number;
}

/** A KServe v2 REST client with the same API as the gRPC client. */
export interface RestClient extends InferenceClient {
  /** A raw request to any endpoint; the body is JSON-encoded. */
  request(method: string, path: string, body?: unknown, options?: CallOptions): Promise<Response>;
}

function jsonValues(datatype: DataType, data: Uint8Array): unknown[] {
  const tensor = new OutputTensor("", datatype, [], data);
  if (datatype === "FP16" || datatype === "BF16") {
    throw new TypeError(`${datatype} tensors cannot travel as JSON: use binary data`);
  }
  return tensor.values().map((v) => (typeof v === "bigint" ? Number(v) : v));
}

function flatten(value: unknown): unknown[] {
  return Array.isArray(value) ? value.flatMap(flatten) : [value];
}

/** Decode a JSON `data` array into the tensor's bytes. */
function jsonToBytes(datatype: DataType, values: unknown[]): Uint8Array {
  if (datatype === "BYTES") return encodeBytes(values.map(String));
  // JSON carries no FP16/BF16 (their typed arrays hold bits, not values).
  const half = datatype === "FP16" || datatype === "BF16";
  const ArrayType = half ? undefined : (elementType(datatype)?.array as Float64ArrayConstructor | undefined);
  if (!ArrayType) throw new TypeError(`cannot read ${datatype} from JSON`);
  const big = datatype === "INT64" || datatype === "UINT64";
  const typed = new ArrayType(
    values.map((v) => (big ? BigInt(v as number) : typeof v === "boolean" ? (v ? 1 : 0) : Number(v))) as number[],
  );
  return new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength);
}

/** An infer reply (its JSON header, then any binary outputs) as a result, or its error. */
function inferReply(
  response: Response,
  bytes: Uint8Array,
  placements: ReadonlyMap<string, SharedMemoryPlacement>,
): InferResult {
  const headerLength = response.headers.get("inference-header-content-length");
  const jsonLength = headerLength === null ? bytes.byteLength : Number(headerLength);
  const text = utf8.decode(bytes.subarray(0, jsonLength));
  if (!response.ok) throw errorFromReply(response.status, replyMessage(text, response), response.headers);
  const parsed = parseReply(text) as {
    model_name: string;
    model_version: string;
    id?: string;
    parameters?: Record<string, ParameterValue>;
    outputs?: {
      name: string;
      datatype: DataType;
      shape: number[];
      data?: unknown;
      parameters?: Record<string, ParameterValue>;
    }[];
  };
  let at = jsonLength;
  const tensors = (parsed.outputs ?? []).map((o) => {
    const size = o.parameters?.binary_data_size;
    let data: Uint8Array;
    if (size !== undefined) {
      data = bytes.subarray(at, at + Number(size));
      at += Number(size);
    } else if (o.data !== undefined) data = jsonToBytes(o.datatype, flatten(o.data));
    else data = new Uint8Array(0);
    return new OutputTensor(o.name, o.datatype, o.shape, data, outputPlacement(o.name, placements, o.parameters));
  });
  return inferResult(
    {
      modelName: parsed.model_name,
      modelVersion: parsed.model_version,
      id: parsed.id ?? "",
      parameters: parsed.parameters ?? {},
    },
    tensors,
  );
}

/**
 * Create a KServe v2 REST client (keep-alive connections; binary tensors by default).
 *
 * @example
 * const client = createRestClient({ baseUrl: "http://localhost:8000" });
 * const result = await client.infer("simple", { inputs: { INPUT0: tensor.int32([1, 16], a), INPUT1: tensor.int32([1, 16], b) } });
 */
export function createRestClient(options: RestClientOptions): RestClient {
  const base = options.baseUrl.replace(/\/$/, "");
  const binary = options.binary ?? true;

  checkTimeoutMs(options.defaultTimeoutMs, "defaultTimeoutMs");

  /**
   * One request: fetch it and read the reply with `read`, turning every failure on the way
   * (connection, deadline, abort, body) into a ConnectError that names the URL.
   */
  async function exchange<T>(
    method: string,
    path: string,
    body: Uint8Array | string | undefined,
    headers: Record<string, string>,
    call: CallOptions,
    compress: boolean,
    read: (response: Response) => Promise<T>,
  ): Promise<T> {
    const url = `${base}${path}`;
    const timeoutMs = call.timeoutMs ?? options.defaultTimeoutMs;
    const context: RestCall = { method, url, timeoutMs };
    try {
      const { signal, deadline } = callSignals({
        ...(call.signal ? { signal: call.signal } : {}),
        ...(timeoutMs !== undefined ? { timeoutMs } : {}),
      });
      context.deadline = deadline;
      let payload = body;
      const all: Record<string, string> = { ...(options.headers ?? {}), ...headers };
      // Triton decompresses infer requests only; other endpoints take plain JSON.
      if (payload !== undefined && compress && options.compression === "gzip") {
        payload = new Uint8Array(await gzipAsync(typeof payload === "string" ? Buffer.from(payload) : payload));
        all["content-encoding"] = "gzip";
      }
      const response = await fetch(url, {
        method,
        headers: { "accept-encoding": "gzip, deflate", ...all },
        ...(payload !== undefined ? { body: payload } : {}),
        ...(signal ? { signal } : {}),
      });
      return await read(response);
    } catch (error) {
      throw restErrorFrom(error, context);
    }
  }

  async function json(method: string, path: string, body?: unknown, call: CallOptions = {}): Promise<unknown> {
    return exchange(
      method,
      path,
      body === undefined ? undefined : JSON.stringify(body),
      body === undefined ? {} : { "content-type": "application/json" },
      call,
      false,
      async (response) => {
        const text = await response.text();
        if (!response.ok) throw errorFromReply(response.status, replyMessage(text, response), response.headers);
        return text === "" ? {} : parseReply(text);
      },
    );
  }

  function status(path: string, call: CallOptions = {}): Promise<boolean> {
    return exchange("GET", path, undefined, {}, call, false, async (response) => {
      await response.arrayBuffer();
      return response.ok;
    });
  }

  const modelPath = (model: string, version = "") =>
    `/v2/models/${encodeURIComponent(model)}${version ? `/versions/${encodeURIComponent(version)}` : ""}`;

  async function infer(model: string, request: InferOptions): Promise<InferResult> {
    const blobs: Uint8Array[] = [];
    const inputs = Object.entries(request.inputs).map(([name, input]) => {
      const base = { name, datatype: input.datatype, shape: input.shape };
      if (!("data" in input)) return { ...base, parameters: sharedMemoryParameters(input) };
      if (binary) {
        blobs.push(input.data);
        return { ...base, parameters: { binary_data_size: input.data.byteLength } };
      }
      return { ...base, data: jsonValues(input.datatype, input.data) };
    });
    const outputs = requestedOutputs(request).map((o) => {
      const parameters: Record<string, ParameterValue> = { ...sharedMemoryParameters(o) };
      if (o.classification !== undefined) parameters.classification = o.classification;
      if (!o.sharedMemory) parameters.binary_data = o.binary ?? binary;
      return { name: o.name, parameters };
    });
    const parameters: Record<string, unknown> = requestParameters(request);
    for (const [k, v] of Object.entries(parameters)) if (typeof v === "bigint") parameters[k] = Number(v);
    if (outputs.length === 0 && binary) parameters.binary_data_output = true;
    const header = JSON.stringify({
      ...(request.id ? { id: request.id } : {}),
      ...(Object.keys(parameters).length > 0 ? { parameters } : {}),
      inputs,
      ...(outputs.length > 0 ? { outputs } : {}),
    });
    const headerBytes = new TextEncoder().encode(header);
    let body: Uint8Array | string = header;
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (blobs.length > 0) {
      const total = headerBytes.byteLength + blobs.reduce((n, b) => n + b.byteLength, 0);
      const out = new Uint8Array(total);
      out.set(headerBytes, 0);
      let at = headerBytes.byteLength;
      for (const b of blobs) {
        out.set(b, at);
        at += b.byteLength;
      }
      body = out;
      headers["content-type"] = "application/octet-stream";
      headers["inference-header-content-length"] = String(headerBytes.byteLength);
    }
    return exchange(
      "POST",
      `${modelPath(model, request.version)}/infer`,
      body,
      headers,
      request,
      true,
      async (response) => inferReply(response, new Uint8Array(await response.arrayBuffer()), outputPlacements(request)),
    );
  }

  return {
    request: (method, path, body, call = {}) =>
      exchange(
        method,
        path,
        body === undefined ? undefined : JSON.stringify(body),
        { "content-type": "application/json" },
        call,
        false,
        async (response) => response,
      ),
    isServerLive: (o) => status("/v2/health/live", o),
    isServerReady: (o) => status("/v2/health/ready", o),
    isModelReady: (model, version, o) => status(`${modelPath(model, version)}/ready`, o),
    serverMetadata: async (o) => (await json("GET", "/v2", undefined, o)) as never,
    modelMetadata: async (model, version, o) => (await json("GET", modelPath(model, version), undefined, o)) as never,
    modelConfig: async (model, version, o) =>
      fromJson(
        ModelConfigSchema,
        (await json("GET", `${modelPath(model, version)}/config`, undefined, o)) as JsonValue,
        {
          ignoreUnknownFields: true,
        },
      ),
    statistics: async (model, version, o) =>
      fromJson(
        ModelStatisticsResponseSchema,
        (await json(
          "GET",
          model ? `${modelPath(model, version)}/stats` : "/v2/models/stats",
          undefined,
          o,
        )) as JsonValue,
        { ignoreUnknownFields: true },
      ),
    infer,
    index: async (o = {}) =>
      ((await json("POST", "/v2/repository/index", o.ready ? { ready: true } : {}, o)) as Record<string, string>[]).map(
        (m) => ({ name: m.name ?? "", version: m.version ?? "", state: m.state ?? "", reason: m.reason ?? "" }),
      ),
    load: async (model, o = {}) => {
      const parameters: Record<string, string> = {};
      if (o.config !== undefined)
        parameters.config = typeof o.config === "string" ? o.config : JSON.stringify(o.config);
      for (const [path, bytes] of Object.entries(o.files ?? {}))
        parameters[path] = Buffer.from(bytes).toString("base64");
      await json("POST", `/v2/repository/models/${encodeURIComponent(model)}/load`, { parameters }, o);
    },
    unload: async (model, o = {}) => {
      await json(
        "POST",
        `/v2/repository/models/${encodeURIComponent(model)}/unload`,
        o.dependents ? { parameters: { unload_dependents: true } } : {},
        o,
      );
    },
    logSettings: async (changes, o) =>
      (await json(changes ? "POST" : "GET", "/v2/logging", changes, o)) as Record<string, string | number | boolean>,
    traceSettings: async (changes, o = {}) =>
      (await json(
        changes ? "POST" : "GET",
        o.model ? `/v2/models/${encodeURIComponent(o.model)}/trace/setting` : "/v2/trace/setting",
        changes,
        o,
      )) as Record<string, string | string[]>,
    registerSystemSharedMemory: async (name, key, byteSize, offset = 0, o) => {
      await json(
        "POST",
        `/v2/systemsharedmemory/region/${encodeURIComponent(name)}/register`,
        { key, offset, byte_size: byteSize },
        o,
      );
    },
    unregisterSystemSharedMemory: async (name, o) => {
      await json(
        "POST",
        `/v2/systemsharedmemory${name ? `/region/${encodeURIComponent(name)}` : ""}/unregister`,
        {},
        o,
      );
    },
    systemSharedMemoryStatus: async (name, o) =>
      (
        (await json(
          "GET",
          `/v2/systemsharedmemory${name ? `/region/${encodeURIComponent(name)}` : ""}/status`,
          undefined,
          o,
        )) as { name: string; key: string; offset: number; byte_size: number }[]
      ).map((r) => ({ name: r.name, key: r.key, offset: r.offset, byteSize: r.byte_size })),
    registerCudaSharedMemory: async (name, rawHandle, deviceId, byteSize, o) => {
      await json(
        "POST",
        `/v2/cudasharedmemory/region/${encodeURIComponent(name)}/register`,
        { raw_handle: { b64: Buffer.from(rawHandle).toString("base64") }, device_id: deviceId, byte_size: byteSize },
        o,
      );
    },
    unregisterCudaSharedMemory: async (name, o) => {
      await json("POST", `/v2/cudasharedmemory${name ? `/region/${encodeURIComponent(name)}` : ""}/unregister`, {}, o);
    },
    cudaSharedMemoryStatus: async (name, o) =>
      (
        (await json(
          "GET",
          `/v2/cudasharedmemory${name ? `/region/${encodeURIComponent(name)}` : ""}/status`,
          undefined,
          o,
        )) as { name: string; device_id: number; byte_size: number }[]
      ).map((r) => ({ name: r.name, deviceId: r.device_id, byteSize: r.byte_size })),
    close: () => {},
  };
}
