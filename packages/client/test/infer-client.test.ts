// The ergonomic API of both clients against a real Galley server serving the example repository:
// typed tensors in and out, every management call, errors, and the gRPC-only streaming.
import { readdirSync } from "node:fs";
import { createLogger, createServer, type GalleyServer } from "@galley/server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  Code,
  ConnectError,
  createGrpcClient,
  createRestClient,
  type GrpcClient,
  type InferenceClient,
  SystemSharedMemory,
  tensor,
} from "../src/index.js";

const EXAMPLES = new URL("../../../examples/model_repository", import.meta.url).pathname;

let server: GalleyServer;
let grpcUrl: string;
let httpUrl: string;

beforeAll(async () => {
  server = createServer({
    modelRepositories: [EXAMPLES],
    controlMode: "explicit",
    loadModels: ["*"],
    allowClientShm: true,
    http: { host: "127.0.0.1", port: 0 },
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: createLogger({ write: () => {} }),
  });
  const { grpc, http } = await server.listen();
  grpcUrl = `http://127.0.0.1:${grpc?.port}`;
  httpUrl = `http://127.0.0.1:${http?.port}`;
}, 60_000);

afterAll(async () => {
  await server.close();
});

const A = Int32Array.from({ length: 16 }, (_, i) => i);
const B = Int32Array.from({ length: 16 }, () => -1);

const clients: [string, () => InferenceClient][] = [
  ["gRPC", () => createGrpcClient({ baseUrl: grpcUrl })],
  ["Connect", () => createGrpcClient({ baseUrl: grpcUrl, protocol: "connect" })],
  ["REST binary", () => createRestClient({ baseUrl: httpUrl })],
  ["REST JSON", () => createRestClient({ baseUrl: httpUrl, binary: false })],
  ["REST gzip", () => createRestClient({ baseUrl: httpUrl, compression: "gzip" })],
  ["gRPC gzip", () => createGrpcClient({ baseUrl: grpcUrl, compression: "gzip" })],
];

describe.each(clients)("the %s client", (_, make) => {
  it("infers with typed tensors and reads typed outputs", async () => {
    const client = make();
    const result = await client.infer("simple", {
      id: "req-1",
      inputs: { INPUT0: tensor.int32([1, 16], A), INPUT1: tensor.int32([1, 16], B) },
    });
    expect(result.modelName).toBe("simple");
    expect(result.id).toBe("req-1");
    expect([...result.output("OUTPUT0").int32()]).toEqual([...A].map((a) => a - 1));
    expect([...result.output("OUTPUT1").int32()]).toEqual([...A].map((a) => a + 1));
    expect(result.output("OUTPUT0").shape).toEqual([1, 16]);
  });

  it("asks for named outputs only, and for classification", async () => {
    const client = make();
    const only = await client.infer("simple", {
      inputs: { INPUT0: tensor.int32([1, 16], A), INPUT1: tensor.int32([1, 16], B) },
      outputs: ["OUTPUT1"],
    });
    expect(Object.keys(only.outputs)).toEqual(["OUTPUT1"]);
    const classes = await client.infer("simple", {
      inputs: { INPUT0: tensor.int32([1, 16], A), INPUT1: tensor.int32([1, 16], B) },
      outputs: [{ name: "OUTPUT0", classification: 2 }],
    });
    expect(classes.output("OUTPUT0").strings()).toEqual(["14:15", "13:14"]);
  });

  it("carries BYTES and FP32 both ways", async () => {
    const client = make();
    const strings = await client.infer("simple_string", {
      inputs: {
        INPUT0: tensor.bytes([1, 16], [...A].map(String)),
        INPUT1: tensor.bytes([1, 16], [...B].map(String)),
      },
    });
    expect(strings.output("OUTPUT0").strings()).toEqual([...A].map((a) => String(a - 1)));
    const floats = await client.infer("add_sub", {
      inputs: { INPUT0: tensor.fp32([4], [1, 2, 3, 4]), INPUT1: tensor.fp32([4], [0.5, 0.5, 0.5, 0.5]) },
    });
    expect([...floats.output("OUTPUT1").fp32()]).toEqual([0.5, 1.5, 2.5, 3.5]);
  });

  it("reads health, metadata, config, statistics and the index", async () => {
    const client = make();
    expect(await client.isServerLive()).toBe(true);
    expect(await client.isServerReady()).toBe(true);
    expect(await client.isModelReady("simple")).toBe(true);
    expect((await client.serverMetadata()).extensions).toContain("model_repository");
    const metadata = await client.modelMetadata("simple");
    expect(metadata.inputs[0]).toEqual({ name: "INPUT0", datatype: "INT32", shape: [-1, 16] });
    const config = await client.modelConfig("simple");
    expect([config.name, config.maxBatchSize]).toEqual(["simple", 8]);
    const stats = await client.statistics("simple");
    expect(stats.modelStats[0]?.name).toBe("simple");
    expect((await client.index()).map((m) => m.name)).toContain("simple_identity");
  });

  it("fails with a ConnectError carrying Triton's code and message, on every transport", async () => {
    const client = make();
    const error = await client
      .infer("no_such_model", { inputs: { X: tensor.int32([1], [1]) } })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as ConnectError).code).toBe(Code.NotFound);
    expect((error as ConnectError).rawMessage).toBe("Request for unknown model: 'no_such_model' is not found");
    // Non-inference calls too (REST: a JSON endpoint, 404 → NOT_FOUND).
    await expect(client.modelConfig("no_such_model")).rejects.toMatchObject({ code: Code.NotFound });
  });

  it("loads with a config override and unloads (explicit model control)", async () => {
    const client = make();
    await client.load("simple_int8", { config: { max_batch_size: 4 } });
    expect((await client.modelConfig("simple_int8")).maxBatchSize).toBe(4);
    await client.unload("simple_int8");
    expect(await client.isModelReady("simple_int8").catch(() => false)).toBe(false);
    await client.load("simple_int8");
    expect((await client.modelConfig("simple_int8")).maxBatchSize).toBe(8);
  });

  it("reads and changes log settings", async () => {
    const client = make();
    const before = await client.logSettings();
    expect(before.log_verbose_level).toBe(0);
    expect((await client.logSettings({ log_verbose_level: 1 })).log_verbose_level).toBe(1);
    await client.logSettings({ log_verbose_level: 0 });
  });

  it("reads and changes trace settings, per model too, and clears them with null", async () => {
    const client = make();
    expect(await client.traceSettings()).toMatchObject({
      trace_level: ["OFF"],
      trace_rate: "1000",
      trace_mode: "triton",
    });
    expect((await client.traceSettings({ trace_rate: "5" }, { model: "simple" })).trace_rate).toBe("5");
    expect((await client.traceSettings(undefined, { model: "simple" })).trace_rate).toBe("5");
    expect((await client.traceSettings()).trace_rate).toBe("1000");
    expect((await client.traceSettings({ trace_rate: null }, { model: "simple" })).trace_rate).toBe("1000");
    await expect(client.traceSettings({ trace_file: "/tmp/x" })).rejects.toThrow(/trace file location/);
  });
});

describe.each(clients.slice(0, 4))("system shared memory through the %s client", (_, make) => {
  it("sends inputs and receives outputs through registered regions, and leaves nothing in /dev/shm", async () => {
    const client = make();
    const before = readdirSync("/dev/shm").filter((f) => f.startsWith(`galley-${process.pid}-`));
    {
      await using input = await SystemSharedMemory.create(128, { client });
      await using output = await SystemSharedMemory.create(128, { client });
      await input.write(0, tensor.int32([1, 16], A).data);
      await input.write(64, tensor.int32([1, 16], B).data);
      expect((await client.systemSharedMemoryStatus(input.name))[0]).toEqual({
        name: input.name,
        key: input.key,
        offset: 0,
        byteSize: 128,
      });
      const result = await client.infer("simple", {
        inputs: { INPUT0: input.input("INT32", [1, 16], 0, 64), INPUT1: input.input("INT32", [1, 16], 64, 64) },
        outputs: [output.output("OUTPUT0", 0, 64), output.output("OUTPUT1", 64, 64)],
      });
      // The outputs are described; their bytes are in the region, and reading them from the
      // result says so instead of returning an empty array.
      expect(result.output("OUTPUT0").shape).toEqual([1, 16]);
      expect(result.output("OUTPUT0").data.byteLength).toBe(0);
      expect(result.output("OUTPUT1").sharedMemory).toEqual({ region: output.name, offset: 64, byteSize: 64 });
      expect(() => result.output("OUTPUT1").int32()).toThrow(
        new TypeError(
          `output 'OUTPUT1' was written to shared-memory region '${output.name}' (offset 64, 64 bytes), ` +
            "not into the response: read it from the region (e.g. region.read(64, 64))",
        ),
      );
      expect(() => result.output("OUTPUT0").values()).toThrow(`shared-memory region '${output.name}' (offset 0,`);
      expect([...new Int32Array((await output.read(0, 64)).buffer)]).toEqual([...A].map((a) => a - 1));
      expect([...new Int32Array((await output.read(64, 64)).buffer)]).toEqual([...A].map((a) => a + 1));
    }
    // Disposed: unregistered on the server and removed from /dev/shm.
    expect(await client.systemSharedMemoryStatus()).toEqual([]);
    expect(readdirSync("/dev/shm").filter((f) => f.startsWith(`galley-${process.pid}-`))).toEqual(before);
  });

  it("reports an unknown region with Triton's message", async () => {
    const client = make();
    const error = await client
      .infer("simple", {
        inputs: {
          INPUT0: { datatype: "INT32", shape: [1, 16], sharedMemory: { region: "nope", byteSize: 64 } },
          INPUT1: { datatype: "INT32", shape: [1, 16], sharedMemory: { region: "nope", byteSize: 64 } },
        },
      })
      .catch((e: unknown) => e as Error);
    expect((error as Error).message).toContain("Unable to find shared memory region: 'nope'");
  });
});

describe("gRPC streaming", () => {
  it("streamInfer yields a decoupled model's responses and ends at its final flag", async () => {
    const client = createGrpcClient({ baseUrl: grpcUrl });
    const values: number[] = [];
    for await (const result of client.streamInfer("repeat_int32", {
      inputs: {
        IN: tensor.int32([3], [5, 6, 7]),
        DELAY: tensor.uint32([3], [1, 1, 1]),
        WAIT: tensor.uint32([1], [0]),
      },
    })) {
      values.push(result.output("OUT").int32()[0] as number);
    }
    expect(values).toEqual([5, 6, 7]);
    // A default-mode model on a stream: exactly one result.
    const one: number[] = [];
    for await (const r of client.streamInfer("simple", {
      inputs: { INPUT0: tensor.int32([1, 16], A), INPUT1: tensor.int32([1, 16], B) },
    })) {
      one.push(r.output("OUTPUT0").int32()[0] as number);
    }
    expect(one).toEqual([-1]);
  });

  it("a stream multiplexes requests, reports errors per request, and marks finals", async () => {
    const client = createGrpcClient({ baseUrl: grpcUrl });
    const stream = client.stream();
    stream.send("square_int32", { id: "sq", inputs: { IN: tensor.int32([1], [2]) }, emptyFinal: true });
    stream.send("no_such_model", { id: "bad", inputs: { IN: tensor.int32([1], [2]) } });
    stream.end();
    const seen: string[] = [];
    for await (const item of stream) {
      seen.push(`${item.id}:${item.error ? "error" : item.result ? "result" : "final"}${item.final ? "!" : ""}`);
    }
    expect(seen.filter((s) => s.startsWith("sq"))).toEqual(["sq:result", "sq:result", "sq:final!"]);
    expect(seen.filter((s) => s.startsWith("bad"))).toEqual(["bad:error!"]);
  });

  it("cancels a stream with an AbortSignal", async () => {
    const client: GrpcClient = createGrpcClient({ baseUrl: grpcUrl });
    const abort = new AbortController();
    const started = Date.now();
    const run = (async () => {
      for await (const _ of client.streamInfer("repeat_int32", {
        signal: abort.signal,
        inputs: {
          IN: tensor.int32([2], [1, 2]),
          DELAY: tensor.uint32([2], [10, 60_000]),
          WAIT: tensor.uint32([1], [0]),
        },
      })) {
        abort.abort();
      }
    })();
    await expect(run).rejects.toBeInstanceOf(ConnectError);
    expect(Date.now() - started).toBeLessThan(10_000);
  });
});

describe("client behaviour", () => {
  it("retries idempotent calls on UNAVAILABLE with backoff, and never retries inference", async () => {
    let attempts = 0;
    const counting = {
      interceptors: [
        (next: Parameters<import("@connectrpc/connect").Interceptor>[0]) => (request: Parameters<typeof next>[0]) => {
          attempts++;
          return next(request);
        },
      ],
    };
    // Nothing listens on port 1: every attempt is UNAVAILABLE.
    const client = createGrpcClient({
      baseUrl: "http://127.0.0.1:1",
      retry: { maxRetries: 2, initialBackoffMs: 5 },
      ...counting,
    });
    await expect(client.isServerLive()).rejects.toMatchObject({ code: Code.Unavailable });
    expect(attempts).toBe(3);
    attempts = 0;
    await expect(client.infer("simple", { inputs: { INPUT0: tensor.int32([1], [1]) } })).rejects.toMatchObject({
      code: Code.Unavailable,
    });
    expect(attempts).toBe(1);
  });

  it("checks tensor shapes when building them, and converts FP16/BF16", async () => {
    expect(() => tensor.int32([2, 3], [1, 2, 3])).toThrow("INT32 tensor of shape [2,3] needs 6 elements, got 3");
    const client = createRestClient({ baseUrl: httpUrl });
    const half = tensor.fp16([3], [1.5, -2, 65504]);
    expect([...new Uint16Array(half.data.buffer)]).toEqual([0x3e00, 0xc000, 0x7bff]);
    expect(tensor.bf16([1], [1.5]).data).toEqual(new Uint8Array([0xc0, 0x3f]));
    expect(await client.isServerLive()).toBe(true);
  });
});
