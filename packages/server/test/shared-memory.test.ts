// System shared memory over gRPC (PROTOCOL.md §1.7, §2.1): registration, inputs read from and
// outputs written into real /dev/shm objects, and Triton's errors.
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  cleanup,
  expectGrpcError,
  int32Bytes,
  readInt32,
  startServer,
  tempRepository,
  waitFor,
} from "./support/harness.js";

const made: string[] = [];
afterEach(async () => {
  await cleanup();
  for (const path of made.splice(0)) rmSync(path, { force: true });
});

/** A /dev/shm object of `size` bytes; returns its key (`/name`) and path. */
function shmObject(size: number): { key: string; path: string } {
  const name = `galley-test-${process.pid}-${randomBytes(4).toString("hex")}`;
  const path = `/dev/shm/${name}`;
  writeFileSync(path, new Uint8Array(size));
  made.push(path);
  return { key: `/${name}`, path };
}

const A = Array.from({ length: 16 }, (_, i) => i);
const B = Array.from({ length: 16 }, (_, i) => 100 + i);
const int64 = (value: number) => ({ parameterChoice: { case: "int64Param" as const, value: BigInt(value) } });
const str = (value: string) => ({ parameterChoice: { case: "stringParam" as const, value } });

function shmRequest(input: string, output: string, outputSize = 64) {
  return {
    modelName: "simple",
    inputs: ["INPUT0", "INPUT1"].map((name, i) => ({
      name,
      datatype: "INT32",
      shape: [1n, 16n],
      parameters: {
        shared_memory_region: str(input),
        shared_memory_offset: int64(64 * i),
        shared_memory_byte_size: int64(64),
      },
    })),
    outputs: ["OUTPUT0", "OUTPUT1"].map((name, i) => ({
      name,
      parameters: {
        shared_memory_region: str(output),
        shared_memory_offset: int64(64 * i),
        shared_memory_byte_size: int64(outputSize),
      },
    })),
  };
}

describe("system shared memory", () => {
  it("is off unless --allow-client-shm, as in Triton", async () => {
    const { client } = await startServer();
    const { key } = shmObject(64);
    await expectGrpcError(
      client.systemSharedMemoryRegister({ name: "r", key, byteSize: 64n }),
      12,
      "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.",
    );
    expect((await client.systemSharedMemoryStatus({})).regions).toEqual({});
  });

  it("reads inputs from one region and writes outputs into another", async () => {
    const { client } = await startServer({ allowClientShm: true });
    const input = shmObject(128);
    const output = shmObject(128);
    writeFileSync(input.path, new Uint8Array([...int32Bytes(A), ...int32Bytes(B)]));
    await client.systemSharedMemoryRegister({ name: "input_data", key: input.key, byteSize: 128n });
    await client.systemSharedMemoryRegister({ name: "output_data", key: output.key, byteSize: 128n });
    const status = await client.systemSharedMemoryStatus({});
    expect(Object.keys(status.regions).sort()).toEqual(["input_data", "output_data"]);
    expect(status.regions.input_data?.key).toBe(input.key);

    const response = await client.modelInfer(shmRequest("input_data", "output_data"));
    // The outputs are described, their bytes are in the region.
    expect(response.outputs.map((o) => o.name)).toEqual(["OUTPUT0", "OUTPUT1"]);
    expect(response.rawOutputContents.every((c) => c.byteLength === 0)).toBe(true);
    const written = new Uint8Array(readFileSync(output.path));
    expect(readInt32(written.subarray(0, 64))).toEqual(A.map((a, i) => a + (B[i] as number)));
    expect(readInt32(written.subarray(64, 128))).toEqual(A.map((a, i) => a - (B[i] as number)));

    await client.systemSharedMemoryUnregister({ name: "" });
    expect((await client.systemSharedMemoryStatus({})).regions).toEqual({});
  });

  it("answers Triton's errors for names, keys, ranges and small output regions", async () => {
    const { client } = await startServer({ allowClientShm: true });
    const region = shmObject(128);
    await client.systemSharedMemoryRegister({ name: "r", key: region.key, byteSize: 128n });
    await expectGrpcError(
      client.systemSharedMemoryRegister({ name: "r", key: region.key, byteSize: 128n }),
      6,
      "shared memory region 'r' already in manager",
    );
    await expectGrpcError(
      client.systemSharedMemoryRegister({ name: "big", key: region.key, byteSize: 4096n }),
      3,
      "failed to register shared memory region 'big': invalid args",
    );
    // A key of slashes only (or none), as Triton words it (ValidateSharedMemoryKey), even for a taken name.
    for (const [name, key] of [
      ["escape", "/"],
      ["escape", "//"],
      ["escape", ""],
      ["r", "/"],
    ]) {
      await expectGrpcError(
        client.systemSharedMemoryRegister({ name, key, byteSize: 1n }),
        3,
        `cannot register shared memory region '${name}' - invalid shm key '${key}'`,
      );
    }
    for (const key of ["/../etc/passwd", "/a/b", "/..", "x\0y"]) {
      await expectGrpcError(
        client.systemSharedMemoryRegister({ name: "escape", key, byteSize: 1n }),
        3,
        `invalid shm key '${key.replace("\0", "\\0")}': a key is one name, optionally after '/'`,
      );
    }
    await expectGrpcError(
      client.systemSharedMemoryRegister({ name: "absent", key: "/galley-no-such-region", byteSize: 1n }),
      13,
      "Unable to open shared memory region: '/galley-no-such-region'",
    );
    await expectGrpcError(
      client.systemSharedMemoryStatus({ name: "nope" }),
      5,
      "Unable to find system shared memory region: 'nope'",
    );
    await expectGrpcError(client.modelInfer(shmRequest("nope", "r")), 5, "Unable to find shared memory region: 'nope'");
    const past = shmRequest("r", "r");
    past.inputs[1] = {
      ...(past.inputs[1] as (typeof past.inputs)[number]),
      parameters: { ...past.inputs[1]?.parameters, shared_memory_offset: int64(100) },
    } as never;
    await expectGrpcError(client.modelInfer(past), 3, "Invalid offset + byte size for shared memory region: 'r'");
    await expectGrpcError(
      client.modelInfer(shmRequest("r", "r", 32)),
      13,
      "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) should be at least 64 bytes to hold the results",
    );
  });

  it("keeps a region unregistered during an inference that uses it listed until the inference ends (Triton)", async () => {
    // A model that says it started, then answers OUT = IN + 1 once the test lets it go.
    const repo = tempRepository();
    const started = join(repo, "started");
    const go = join(repo, "go");
    mkdirSync(join(repo, "gate", "1"), { recursive: true });
    writeFileSync(
      join(repo, "gate", "config.pbtxt"),
      `name: "gate" backend: "js" max_batch_size: 0
       input { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } output { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }`,
    );
    writeFileSync(
      join(repo, "gate", "1", "model.mjs"),
      `import { existsSync, writeFileSync } from "node:fs";
       export default class Gate {
         async execute(requests) {
           writeFileSync(${JSON.stringify(started)}, "");
           while (!existsSync(${JSON.stringify(go)})) await new Promise((resolve) => setTimeout(resolve, 10));
           return requests.map((r) => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(r.input("IN").typed()[0] + 1) }] }));
         }
       }`,
    );
    const { client } = await startServer({ modelRepositories: [repo], allowClientShm: true });
    const region = shmObject(8);
    writeFileSync(region.path, int32Bytes([41, 0]));
    await client.systemSharedMemoryRegister({ name: "io", key: region.key, byteSize: 8n });
    const at = (offset: number) => ({
      shared_memory_region: str("io"),
      shared_memory_offset: int64(offset),
      shared_memory_byte_size: int64(4),
    });
    const inference = client.modelInfer({
      modelName: "gate",
      inputs: [{ name: "IN", datatype: "INT32", shape: [1n], parameters: at(0) }],
      outputs: [{ name: "OUT", parameters: at(4) }],
    });
    await waitFor(() => existsSync(started), { what: "the model to start" });
    await client.systemSharedMemoryUnregister({ name: "io" });
    // Still listed (and registered: the output is written into it) while the inference runs.
    expect(Object.keys((await client.systemSharedMemoryStatus({})).regions)).toEqual(["io"]);
    await expectGrpcError(
      client.systemSharedMemoryRegister({ name: "io", key: region.key, byteSize: 8n }),
      6,
      "shared memory region 'io' already in manager",
    );
    writeFileSync(go, "");
    await inference;
    expect(readInt32(new Uint8Array(readFileSync(region.path)).subarray(4, 8))).toEqual([42]);
    expect((await client.systemSharedMemoryStatus({})).regions).toEqual({});
    await client.systemSharedMemoryRegister({ name: "io", key: region.key, byteSize: 8n });
    expect(Object.keys((await client.systemSharedMemoryStatus({})).regions)).toEqual(["io"]);
  });
});
