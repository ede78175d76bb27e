// Client-side CUDA shared memory on a machine without a GPU: the API's argument errors, the
// addon's clean refusal without a CUDA driver, and the register/status/unregister calls over gRPC
// and REST against real servers (one without GPUs: Triton's CPU-build answers; one with GPU 0
// listed but no driver: the handle reaches the server intact and fails to open there). Round
// trips through real device memory are in packages/backends-native/test/gpu/cuda-shm-gpu.mjs.
import { existsSync } from "node:fs";
import { Code, ConnectError } from "@connectrpc/connect";
import { createLogger, createServer, type GalleyServer } from "@galley/server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  CUDA_IPC_HANDLE_BYTES,
  CudaSharedMemory,
  createGrpcClient,
  createRestClient,
  type InferenceClient,
} from "../src/index.js";

const gpuMachine = existsSync("/dev/nvidiactl") && existsSync("/dev/nvidia0");
const servers: GalleyServer[] = [];

async function start(gpus: number[]): Promise<{ grpc: InferenceClient; rest: InferenceClient }> {
  const server = createServer({
    log: createLogger({ info: false, warning: false, error: false }),
    allowClientShm: true,
    gpus,
    exitTimeoutSecs: 5,
    http: { host: "127.0.0.1", port: 0 },
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
  });
  servers.push(server);
  const { http, grpc } = await server.listen();
  return {
    grpc: createGrpcClient({ baseUrl: `http://127.0.0.1:${grpc?.port}` }),
    rest: createRestClient({ baseUrl: `http://127.0.0.1:${http?.port}` }),
  };
}

let cpuOnly: { grpc: InferenceClient; rest: InferenceClient };
let listed: { grpc: InferenceClient; rest: InferenceClient };
beforeAll(async () => {
  [cpuOnly, listed] = await Promise.all([start([]), start([0])]);
});
afterAll(async () => {
  for (const c of [cpuOnly, listed]) for (const client of Object.values(c)) client.close();
  await Promise.all(servers.map((s) => s.close()));
});

describe("CudaSharedMemory.create: argument errors", () => {
  it("refuses sizes and devices that are not integers in range, before allocating", async () => {
    for (const size of [0, -1, 1.5, Number.NaN, 2 ** 53]) {
      await expect(CudaSharedMemory.create(size)).rejects.toThrow(RangeError);
    }
    for (const device of [-1, 0.5]) {
      await expect(CudaSharedMemory.create(64, { device })).rejects.toThrow(/device must be a non-negative integer/);
    }
    expect(CUDA_IPC_HANDLE_BYTES).toBe(64);
  });
});

describe.skipIf(gpuMachine)("CudaSharedMemory without a CUDA driver", () => {
  it("rejects with the addon's reason and registers nothing", async () => {
    await expect(CudaSharedMemory.create(64, { device: 0, client: listed.grpc })).rejects.toThrow(
      /^Unable to allocate 64 bytes on CUDA device 0: the CUDA driver is unavailable/,
    );
    expect(await listed.grpc.cudaSharedMemoryStatus()).toEqual([]);
  });
});

describe("CUDA shared-memory calls", () => {
  it("against a server without GPUs: Triton's CPU-build answers on gRPC and REST", async () => {
    const handle = new Uint8Array(64);
    const grpcError = await cpuOnly.grpc.registerCudaSharedMemory("r", handle, 0, 64).catch((e: unknown) => e);
    expect(grpcError).toBeInstanceOf(ConnectError);
    expect((grpcError as ConnectError).code).toBe(Code.InvalidArgument);
    expect((grpcError as ConnectError).rawMessage).toBe(
      "failed to register CUDA shared memory region: 'r', GPUs not supported",
    );
    const restError = await cpuOnly.rest.registerCudaSharedMemory("r", handle, 0, 64).catch((e: unknown) => e);
    // The same error over REST: 400, so INVALID_ARGUMENT, with the same text.
    expect(restError).toBeInstanceOf(ConnectError);
    expect((restError as ConnectError).code).toBe(Code.InvalidArgument);
    expect((restError as ConnectError).rawMessage).toBe(
      "failed to register CUDA shared memory region: 'r', GPUs not supported",
    );
    for (const client of [cpuOnly.grpc, cpuOnly.rest]) {
      expect(await client.cudaSharedMemoryStatus()).toEqual([]);
      await client.unregisterCudaSharedMemory("r");
      await client.unregisterCudaSharedMemory();
    }
  });

  it("against a server with a GPU listed but no driver: the 64-byte handle arrives intact (raw on gRPC, base64 on REST) and fails to open", async () => {
    const handle = new Uint8Array(64).fill(7);
    for (const client of [listed.grpc, listed.rest]) {
      const error = await client.registerCudaSharedMemory("r", handle, 0, 64).catch((e: unknown) => e);
      expect((error as Error).message).toContain("failed to register shared memory region: invalid args");
    }
    // A 63-byte handle is refused by the REST frontend's own check, before CUDA.
    const short = await listed.rest.registerCudaSharedMemory("r", handle.subarray(1), 0, 64).catch((e: unknown) => e);
    expect((short as Error).message).toContain("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t");
    await expect(listed.rest.cudaSharedMemoryStatus("r")).rejects.toThrow(
      "Unable to find cuda shared memory region: 'r'",
    );
  });
});
