// Triton's answers to bad shared-memory registrations and tensor ranges (server
// src/shared_memory_manager.cc): the key prefix kept for the Python backend, a registration past
// the end of the object, and the three checks of a tensor's place in its region (offset, 64-bit
// overflow, end), each with its own text, over gRPC and REST.
import { randomBytes } from "node:crypto";
import { rmSync, writeFileSync } from "node:fs";
import { Code } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { postJson } from "./http-fixture.js";
import { cleanup, expectGrpcError, startServer } from "./support/harness.js";

const made: string[] = [];
afterEach(async () => {
  await cleanup();
  for (const path of made.splice(0)) rmSync(path, { force: true });
});

/** A /dev/shm object of `size` bytes; returns its key (`/name`). */
function shmObject(size: number): string {
  const name = `galley-test-${process.pid}-${randomBytes(4).toString("hex")}`;
  writeFileSync(`/dev/shm/${name}`, new Uint8Array(size));
  made.push(`/dev/shm/${name}`);
  return `/${name}`;
}

const int64 = (value: bigint) => ({ parameterChoice: { case: "int64Param" as const, value } });
const str = (value: string) => ({ parameterChoice: { case: "stringParam" as const, value } });

/** `simple` with INPUT0 at `offset`/`byteSize` of region `r` and INPUT1 from raw contents. */
function shmInput(offset: bigint, byteSize: bigint) {
  return {
    modelName: "simple",
    inputs: [
      {
        name: "INPUT0",
        datatype: "INT32",
        shape: [1n, 16n],
        parameters: {
          shared_memory_region: str("r"),
          shared_memory_offset: int64(offset),
          shared_memory_byte_size: int64(byteSize),
        },
      },
      { name: "INPUT1", datatype: "INT32", shape: [1n, 16n] },
    ],
    rawInputContents: [new Uint8Array(64)],
  };
}

const RESERVED = "triton_python_backend_shm_region_";

describe("shared-memory errors", () => {
  it("refuses keys under the Python backend's prefix up front, leading slashes or not", async () => {
    const { client, httpUrl } = await startServer({ allowClientShm: true, http: true });
    for (const key of [`${RESERVED}x`, `/${RESERVED}x`, `///${RESERVED}x`]) {
      await expectGrpcError(
        client.systemSharedMemoryRegister({ name: "mine", key, byteSize: 8n }),
        Code.InvalidArgument,
        `cannot register shared memory region 'mine' with key '${key}' as the key contains the reserved prefix '${RESERVED}'`,
      );
    }
    const port = Number(new URL(httpUrl ?? "").port);
    const answer = await postJson(port, "/v2/systemsharedmemory/region/mine/register", {
      key: `/${RESERVED}abc`,
      byte_size: 8,
    });
    expect(answer.status).toBe(400);
    expect(answer.json()).toEqual({
      error: `cannot register shared memory region 'mine' with key '/${RESERVED}abc' as the key contains the reserved prefix '${RESERVED}'`,
    });
    expect((await client.systemSharedMemoryStatus({})).regions).toEqual({});
  });

  it("refuses a registration that reaches past the object's end as 'invalid args'", async () => {
    const { client, httpUrl } = await startServer({ allowClientShm: true, http: true });
    const key = shmObject(64);
    for (const [offset, byteSize] of [
      [0n, 65n],
      [1n, 64n],
      [64n, 1n],
      [65n, 0n],
    ] as const) {
      await expectGrpcError(
        client.systemSharedMemoryRegister({ name: "big", key, offset, byteSize }),
        Code.InvalidArgument,
        "failed to register shared memory region 'big': invalid args",
      );
    }
    const port = Number(new URL(httpUrl ?? "").port);
    const answer = await postJson(port, "/v2/systemsharedmemory/region/big/register", {
      key,
      offset: 8,
      byte_size: 64,
    });
    expect(answer.status).toBe(400);
    expect(answer.json()).toEqual({ error: "failed to register shared memory region 'big': invalid args" });
    await client.systemSharedMemoryRegister({ name: "fits", key, offset: 0n, byteSize: 64n });
  });

  it("tells a bad offset, an overflowing size and a range past the end apart", async () => {
    const { client } = await startServer({ allowClientShm: true });
    await client.systemSharedMemoryRegister({ name: "r", key: shmObject(128), byteSize: 128n });
    // The offset must lie inside the region; a negative int64 is a huge size_t, as in Triton.
    for (const offset of [128n, 1000n, -1n]) {
      await expectGrpcError(
        client.modelInfer(shmInput(offset, 64n)),
        Code.InvalidArgument,
        "Invalid offset for shared memory region: 'r'",
      );
    }
    await expectGrpcError(
      client.modelInfer(shmInput(32n, -32n)),
      Code.InvalidArgument,
      "Integer overflow detected: byte_size (18446744073709551584) + offset (32) exceeds maximum value (18446744073709551615) for region 'r'",
    );
    await expectGrpcError(
      client.modelInfer(shmInput(100n, 64n)),
      Code.InvalidArgument,
      "Invalid offset + byte size for shared memory region: 'r'",
    );
    const fits = await client.modelInfer(shmInput(64n, 64n));
    expect(fits.outputs.map((o) => o.name)).toEqual(["OUTPUT0", "OUTPUT1"]);
  });

  it("answers the same texts for outputs over REST, with 400", async () => {
    const { client, httpUrl } = await startServer({ allowClientShm: true, http: true });
    await client.systemSharedMemoryRegister({ name: "r", key: shmObject(64), byteSize: 64n });
    const port = Number(new URL(httpUrl ?? "").port);
    const infer = (offset: number, byteSize: number) =>
      postJson(port, "/v2/models/simple/infer", {
        inputs: ["INPUT0", "INPUT1"].map((name) => ({
          name,
          shape: [1, 16],
          datatype: "INT32",
          data: new Array(16).fill(1),
        })),
        outputs: [
          {
            name: "OUTPUT0",
            parameters: { shared_memory_region: "r", shared_memory_offset: offset, shared_memory_byte_size: byteSize },
          },
        ],
      });
    const offset = await infer(64, 64);
    expect([offset.status, offset.json()]).toEqual([400, { error: "Invalid offset for shared memory region: 'r'" }]);
    const range = await infer(32, 64);
    expect([range.status, range.json()]).toEqual([
      400,
      { error: "Invalid offset + byte size for shared memory region: 'r'" },
    ]);
  });
});
