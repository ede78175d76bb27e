// CUDA shared memory without a GPU (CI): the answers of a tritonserver built without GPUs, over
// REST and gRPC; and, with a GPU listed but no CUDA driver, Triton's argument checks in its order
// (HTTP's raw_handle/b64/byte_size/device_id, the handle's size) before the driver is touched,
// then its generic "invalid args" when the handle does not open. The GPU run
// (packages/backends-native/test/gpu/cuda-shm-gpu.mjs) covers real regions.
import { randomBytes } from "node:crypto";
import { existsSync, rmSync, writeFileSync } from "node:fs";
import { Code } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { postJson, send } from "./http-fixture.js";
import { cleanup, EXAMPLES, expectGrpcError, recordingLog, startServer } from "./support/harness.js";

const gpuMachine = existsSync("/dev/nvidiactl") && existsSync("/dev/nvidia0");
const made: string[] = [];
afterEach(async () => {
  await cleanup();
  for (const path of made.splice(0)) rmSync(path, { force: true });
});

const handle64 = () => randomBytes(64).toString("base64");

/** A server with no models (fast to start) whose log is kept, not printed. */
function start(options: Parameters<typeof startServer>[0]) {
  return startServer({ modelRepositories: [], log: recordingLog().log, ...options });
}

describe("CUDA shared memory on a server without GPUs", () => {
  it("REST: no regions, registration refused with Triton's text, unregistration succeeds", async () => {
    const { httpUrl } = await start({ gpus: [], allowClientShm: true, http: true });
    const port = Number(new URL(httpUrl as string).port);
    const status = await send(port, "GET", "/v2/cudasharedmemory/status");
    expect([status.status, status.text]).toEqual([200, "[]"]);
    const named = await send(port, "GET", "/v2/cudasharedmemory/region/r/status");
    expect([named.status, named.text]).toEqual([404, `{"error":"Unable to find cuda shared memory region: 'r'"}`]);
    // The body is not even read (Triton's CPU build does not parse it).
    for (const body of [{}, "not json", { raw_handle: { b64: handle64() }, device_id: 0, byte_size: 64 }]) {
      const register = await postJson(port, "/v2/cudasharedmemory/region/gpu0/register", body);
      expect([register.status, register.text]).toEqual([
        400,
        `{"error":"failed to register CUDA shared memory region: 'gpu0', GPUs not supported"}`,
      ]);
    }
    const nameless = await postJson(port, "/v2/cudasharedmemory/register", {});
    expect([nameless.status, nameless.text]).toEqual([
      400,
      `{"error":"'region name' is necessary to register cuda shared memory region"}`,
    ]);
    expect((await send(port, "POST", "/v2/cudasharedmemory/region/gpu0/unregister")).status).toBe(200);
    expect((await send(port, "POST", "/v2/cudasharedmemory/unregister")).status).toBe(200);
  });

  it("gRPC: the same answers, INVALID_ARGUMENT for a registration", async () => {
    const { client } = await start({ gpus: [], allowClientShm: true });
    expect((await client.cudaSharedMemoryStatus({})).regions).toEqual({});
    await expectGrpcError(
      client.cudaSharedMemoryStatus({ name: "r" }),
      Code.NotFound,
      "Unable to find cuda shared memory region: 'r'",
    );
    await expectGrpcError(
      client.cudaSharedMemoryRegister({ name: "r", rawHandle: new Uint8Array(64), deviceId: 0n, byteSize: 64n }),
      Code.InvalidArgument,
      "failed to register CUDA shared memory region: 'r', GPUs not supported",
    );
    await client.cudaSharedMemoryUnregister({ name: "r" });
    await client.cudaSharedMemoryUnregister({});
  });

  it("one namespace with system regions: each kind's status names the other kind", async () => {
    const { client, httpUrl } = await start({ gpus: [], allowClientShm: true, http: true });
    const key = `galley-test-${process.pid}-${randomBytes(4).toString("hex")}`;
    writeFileSync(`/dev/shm/${key}`, new Uint8Array(16));
    made.push(`/dev/shm/${key}`);
    await client.systemSharedMemoryRegister({ name: "sys", key: `/${key}`, byteSize: 16n });
    const port = Number(new URL(httpUrl as string).port);
    const cuda = await send(port, "GET", "/v2/cudasharedmemory/region/sys/status");
    expect([cuda.status, cuda.text]).toEqual([
      404,
      `{"error":"The region named 'sys' is registered as system shared memory, not CUDA shared memory"}`,
    ]);
    // CUDA unregister-all leaves system regions alone.
    await client.cudaSharedMemoryUnregister({});
    expect(Object.keys((await client.systemSharedMemoryStatus({})).regions)).toEqual(["sys"]);
    expect((await send(port, "GET", "/v2/cudasharedmemory/status")).text).toBe("[]");
  });
});

describe.skipIf(gpuMachine)("CUDA shared memory with a GPU listed but no CUDA driver", () => {
  async function rest(allowClientShm = true, models = false) {
    const { log, lines } = recordingLog();
    const { httpUrl, client } = await start({
      gpus: [0],
      allowClientShm,
      http: true,
      log,
      ...(models ? { modelRepositories: [EXAMPLES] } : {}),
    });
    return { port: Number(new URL(httpUrl as string).port), client, lines };
  }
  const register = (port: number, body: unknown) => postJson(port, "/v2/cudasharedmemory/region/r/register", body);

  it("REST: Triton's checks of the body, in its order, before CUDA is touched", async () => {
    const { port } = await rest();
    const cases: [unknown, number, string][] = [
      ["{", 500, "failed to parse the request JSON buffer"],
      [{ device_id: 0, byte_size: 64 }, 400, "Shared memory register request has no 'raw_handle' field"],
      [{ raw_handle: {}, device_id: 0, byte_size: 64 }, 500, "attempt to access non-existing object member 'b64'"],
      [{ raw_handle: { b64: 5 }, device_id: 0, byte_size: 64 }, 500, "attempt to access JSON non-string as string"],
      [
        { raw_handle: { b64: handle64() }, device_id: 0 },
        500,
        "attempt to access non-existing object member 'byte_size'",
      ],
      [
        { raw_handle: { b64: handle64() }, device_id: 0, byte_size: -1 },
        500,
        "attempt to access JSON non-unsigned-integer as unsigned-integer",
      ],
      [
        { raw_handle: { b64: handle64() }, device_id: 0, byte_size: 1.5 },
        500,
        "attempt to access JSON non-unsigned-integer as unsigned-integer",
      ],
      [
        { raw_handle: { b64: handle64() }, byte_size: 64 },
        500,
        "attempt to access non-existing object member 'device_id'",
      ],
      [
        { raw_handle: { b64: handle64() }, device_id: -1, byte_size: 64 },
        500,
        "attempt to access JSON non-unsigned-integer as unsigned-integer",
      ],
      [
        { raw_handle: { b64: randomBytes(63).toString("base64") }, device_id: 0, byte_size: 64 },
        400,
        "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
      ],
      [
        { raw_handle: { b64: randomBytes(65).toString("base64") }, device_id: 0, byte_size: 64 },
        400,
        "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
      ],
      [
        { raw_handle: { b64: "!!not base64!!" }, device_id: 0, byte_size: 64 },
        400,
        "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
      ],
      [{ raw_handle: { b64: "" }, device_id: 0, byte_size: 64 }, 400, "'raw_handle' must be a valid base64 encoded"],
    ];
    for (const [body, status, text] of cases) {
      const answer = await register(port, body);
      expect(answer.status, JSON.stringify(body)).toBe(status);
      expect((answer.json() as { error: string }).error, JSON.stringify(body)).toContain(text);
    }
  });

  it("REST: a handle that does not open, a device not listed, a huge byte_size: Triton's generic text, the reason logged", async () => {
    const { port, lines } = await rest();
    for (const body of [
      { raw_handle: { b64: handle64() }, device_id: 0, byte_size: 64 },
      { raw_handle: { b64: handle64() }, device_id: 7, byte_size: 64 },
      { raw_handle: { b64: handle64() }, device_id: 0, byte_size: "18446744073709551615" },
    ]) {
      const json = JSON.stringify(body).replace('"18446744073709551615"', "18446744073709551615");
      const answer = await register(port, json);
      expect([answer.status, answer.text]).toEqual([
        400,
        `{"error":"failed to register shared memory region: invalid args"}`,
      ]);
    }
    expect(lines.join("\n")).toContain("the CUDA driver is unavailable");
    expect(lines.join("\n")).toContain("device 7 is not one of this server's GPUs");
    // Nothing was registered.
    expect((await send(port, "GET", "/v2/cudasharedmemory/status")).text).toBe("[]");
  });

  it("REST: client shared memory disabled gives Triton's 501 once a GPU is there", async () => {
    const { port } = await rest(false);
    const answer = await register(port, { raw_handle: { b64: handle64() }, device_id: 0, byte_size: 64 });
    expect([answer.status, answer.text]).toEqual([
      501,
      `{"error":"Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."}`,
    ]);
  });

  it("gRPC: a handle of the wrong size, a negative or unknown device, a handle that does not open", async () => {
    const { client } = await start({ gpus: [0], allowClientShm: true });
    for (const [rawHandle, deviceId] of [
      [new Uint8Array(0), 0n],
      [new Uint8Array(10), 0n],
      [new Uint8Array(128), 0n],
      [new Uint8Array(64), -1n],
      [new Uint8Array(64), 1n],
      [new Uint8Array(64), 0n],
    ] as const) {
      await expectGrpcError(
        client.cudaSharedMemoryRegister({ name: "r", rawHandle, deviceId, byteSize: 64n }),
        Code.InvalidArgument,
        "failed to register shared memory region: invalid args",
      );
    }
    expect((await client.cudaSharedMemoryStatus({})).regions).toEqual({});
    await client.cudaSharedMemoryUnregister({ name: "r" });
  });

  it("an inference naming an unregistered region: Triton's NOT_FOUND", async () => {
    const { port } = await rest(true, true);
    const answer = await postJson(port, "/v2/models/simple/infer", {
      inputs: [
        {
          name: "INPUT0",
          datatype: "INT32",
          shape: [1, 16],
          parameters: { shared_memory_region: "gpu", shared_memory_byte_size: 64 },
        },
        { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: new Array(16).fill(1) },
      ],
    });
    expect([answer.status, answer.text]).toEqual([404, `{"error":"Unable to find shared memory region: 'gpu'"}`]);
  });
});
