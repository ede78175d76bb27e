// Triton Python models (backend "python"): real stub processes, over real gRPC. Fixture models
// in test/fixtures/python are Triton Python models, unchanged.
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { copyPythonModels, pythonWithNumpy, shmLeftovers, stubProcesses } from "./python-harness.js";
import {
  bytesTensor,
  cleanup,
  fp32Bytes,
  readBytesTensor,
  readFp32,
  recordingLog,
  startServer,
  tempRepository,
  waitFor,
} from "./support/harness.js";

const python = pythonWithNumpy();

afterEach(cleanup);

const ours = () => stubProcesses().filter((p) => p.ppid === process.pid);
const ourShm = () => shmLeftovers().filter((n) => n.includes(`_${process.pid}_`));

async function pythonServer(models: string[], extra: Parameters<typeof startServer>[0] = {}) {
  const repo = tempRepository();
  copyPythonModels(repo, models);
  const running = await startServer({ modelRepositories: [repo], pythonExecutable: python, ...extra });
  expect(running.failedModels).toEqual([]);
  return { ...running, repo };
}

function addSubRequest(a: number[], b: number[]) {
  return {
    modelName: "add_sub",
    inputs: [
      { name: "INPUT0", datatype: "FP32", shape: [4n] },
      { name: "INPUT1", datatype: "FP32", shape: [4n] },
    ],
    rawInputContents: [fp32Bytes(a), fp32Bytes(b)],
  };
}

describe("a Python model", () => {
  it("answers Triton's add_sub; unload runs finalize, stops the process and leaves no shared memory", async () => {
    const { log, lines } = recordingLog();
    const { client, server } = await pythonServer(["add_sub"], { log });
    for (let i = 0; i < 3; i++) {
      const reply = await client.modelInfer(addSubRequest([1, 2, 3, 4], [10, 20, 30 + i, 40]));
      expect(reply.outputs.map((o) => o.name)).toEqual(["OUTPUT0", "OUTPUT1"]);
      expect(readFp32(reply.rawOutputContents[0])).toEqual([11, 22, 33 + i, 44]);
      expect(readFp32(reply.rawOutputContents[1])).toEqual([-9, -18, -27 - i, -36]);
    }
    expect(ours()).toHaveLength(1);
    await server.close();
    expect(ours()).toHaveLength(0);
    expect(ourShm()).toEqual([]);
    // finalize's print reached the log through the stub's stdout.
    expect(lines.some((l) => l.includes("add_sub_0_0: Cleaning up..."))).toBe(true);
  });

  it("shows the model every pb_utils call: args, request accessors, configs, tensors, DLPack, logger, metrics", async () => {
    const { log, lines } = recordingLog();
    log.update({ log_verbose_level: 1 });
    const { client, server, metricsUrl } = await pythonServer(["inspect"], { log, metrics: true });
    const value = [1, 2, 3, 4.5];
    const reply = await client.modelInfer({
      modelName: "inspect",
      id: "req-7",
      parameters: {
        custom: { parameterChoice: { case: "stringParam", value: "yes" } },
        sequence_id: { parameterChoice: { case: "int64Param", value: 42n } },
        sequence_start: { parameterChoice: { case: "boolParam", value: true } },
        timeout: { parameterChoice: { case: "int64Param", value: 5_000_000n } },
      },
      inputs: [{ name: "IN", datatype: "FP32", shape: [2n, 2n] }],
      outputs: [{ name: "INFO" }, { name: "OUT" }],
      rawInputContents: [fp32Bytes(value)],
    });
    const info = JSON.parse(readBytesTensor(reply.rawOutputContents[0])[0] ?? "");
    expect(readFp32(reply.rawOutputContents[1])).toEqual(value);
    expect(info.args).toEqual({
      model_instance_kind: "CPU",
      model_instance_name: expect.stringMatching(/^inspect_0_[01]$/),
      model_instance_device_id: "0",
      model_repository: expect.stringMatching(/\/inspect$/),
      model_version: "1",
      model_name: "inspect",
    });
    expect(info).toMatchObject({
      config_name: "inspect",
      input_config: { name: "IN", data_type: "TYPE_FP32", dims: [2, 2] },
      output_config: { name: "OUT", data_type: "TYPE_FP32", dims: [2, 2] },
      missing_config: null,
      name: "IN",
      is_cpu: true,
      dtype: "float32",
      shape: [2, 2],
      is_view: true,
      missing_input: true,
      request_id: "req-7",
      correlation_id: 42,
      flags: 1,
      parameters: { custom: "yes" },
      timeout: 5_000_000,
      requested: ["INFO", "OUT"],
      cancelled: false,
      counter: 1,
      gauge: 10.5,
      counter_set: "refused",
      final_flag: 1,
      codes: [0, 1, 2, 3, 4, 5, 6, 7],
      decoupled: false,
      string_types: [
        "TYPE_BOOL",
        "TYPE_FP16",
        "TYPE_FP32",
        "TYPE_FP64",
        "TYPE_INT16",
        "TYPE_INT32",
        "TYPE_INT64",
        "TYPE_INT8",
        "TYPE_STRING",
        "TYPE_UINT16",
        "TYPE_UINT32",
        "TYPE_UINT64",
        "TYPE_UINT8",
      ],
    });
    expect(info.types).toEqual(["bool", "uint8", "int32", "int64", "float16", "float32", "float64", "object"]);
    // Two instances (instance_group count 2): two processes.
    expect(ours()).toHaveLength(2);
    // Logger lines reach Galley's log with the instance's name and level.
    for (const [level, text] of [
      ["I", "inspect initialized inspect_0_0"],
      ["W", "a warning"],
      ["E", "an error"],
      ["I", "a verbose line"],
      ["W", "a warning by level"],
      ["E", "an error by level"],
      ["I", "an info by level"],
      ["I", "a verbose line by level"],
    ] as const) {
      expect(
        lines.some((l) => l.startsWith(level) && l.includes(`: ${text}`)),
        text,
      ).toBe(true);
    }
    // Custom metrics on the metrics endpoint.
    const metrics = await (await fetch(`${metricsUrl}/metrics`)).text();
    expect(metrics).toContain("# TYPE inspect_requests counter");
    expect(metrics).toContain(`inspect_requests{instance="${info.args.model_instance_name}"} 1`);
    expect(metrics).toContain(`inspect_last_sum{instance="${info.args.model_instance_name}"} 10.5`);
    // A histogram (buckets 1, 10, 100) that observed 10.5 once.
    const instance = `instance="${info.args.model_instance_name}"`;
    expect(metrics).toContain("# TYPE inspect_sizes histogram");
    expect(metrics).toContain(`inspect_sizes_bucket{${instance},le="10"} 0`);
    expect(metrics).toContain(`inspect_sizes_bucket{${instance},le="100"} 1`);
    expect(metrics).toContain(`inspect_sizes_bucket{${instance},le="+Inf"} 1`);
    expect(metrics).toContain(`inspect_sizes_sum{${instance}} 10.5`);
    expect(metrics).toContain(`inspect_sizes_count{${instance}} 1`);
    await server.close();
    expect(ours()).toHaveLength(0);
  });

  it("reads control frames larger than one read (a 3 MiB parameter) whole, both ways", async () => {
    const { client } = await pythonServer(["inspect"]);
    // Past the stub's 64 KiB read size and not a multiple of it; unicode, so bytes ≠ characters.
    const big = "ü".repeat(1_500_000) + "end";
    const call = (id: string) =>
      client.modelInfer({
        modelName: "inspect",
        id,
        parameters: { big: { parameterChoice: { case: "stringParam", value: big } } },
        inputs: [{ name: "IN", datatype: "FP32", shape: [2n, 2n] }],
        outputs: [{ name: "INFO" }],
        rawInputContents: [fp32Bytes([1, 2, 3, 4])],
      });
    const replies = await Promise.all([call("a"), call("b")]);
    for (const [i, reply] of replies.entries()) {
      const info = JSON.parse(readBytesTensor(reply.rawOutputContents[0])[0] ?? "");
      expect(info.request_id).toBe(["a", "b"][i]);
      expect(info.parameters.big === big).toBe(true);
    }
  });

  it("passes BYTES tensors as object arrays of bytes, byte for byte, batched", async () => {
    const { client } = await pythonServer(["identity_bytes"]);
    const elements = ["", "hello", "\u0000nul\u0000", "ünïcödé", "x".repeat(10_000)];
    const replies = await Promise.all(
      [0, 1, 2].map((i) =>
        client.modelInfer({
          modelName: "identity_bytes",
          inputs: [{ name: "INPUT0", datatype: "BYTES", shape: [1n, BigInt(elements.length)] }],
          rawInputContents: [bytesTensor(elements.map((e) => e + String(i)))],
        }),
      ),
    );
    for (const [i, reply] of replies.entries()) {
      expect(readBytesTensor(reply.rawOutputContents[0])).toEqual(elements.map((e) => e + String(i)));
      const lengths = reply.rawOutputContents[1] as Uint8Array;
      expect([...new BigInt64Array(lengths.slice().buffer)].map(Number)).toEqual(
        elements.map((e) => new TextEncoder().encode(e + String(i)).byteLength),
      );
    }
  });

  it("passes a 16 MiB tensor through an identity model byte-exact", async () => {
    const { client } = await pythonServer(["identity"]);
    for (let round = 0; round < 2; round++) {
      const data = new Uint8Array(randomBytes(16 * 1024 * 1024));
      const reply = await client.modelInfer({
        modelName: "identity",
        inputs: [{ name: "INPUT0", datatype: "UINT8", shape: [BigInt(data.byteLength)] }],
        rawInputContents: [data],
      });
      expect(reply.outputs[0]?.shape).toEqual([BigInt(data.byteLength)]);
      expect(Buffer.compare(Buffer.from(reply.rawOutputContents[0] as Uint8Array), Buffer.from(data))).toBe(0);
    }
  });

  it("keeps large outputs it lends to responses intact while later requests reuse the shared memory", async () => {
    const { server } = await pythonServer(["identity_inverse"]);
    const inputs = Array.from({ length: 6 }, () => new Uint8Array(randomBytes(1024 * 1024)));
    const responses = [];
    for (const data of inputs) {
      responses.push(
        await server.core.infer({
          modelName: "identity_inverse",
          modelVersion: "",
          id: "",
          parameters: {},
          inputs: [{ name: "INPUT0", datatype: "UINT8", shape: [data.byteLength], data, parameters: {} }],
          outputs: [],
        }),
      );
    }
    // Every response is still held here, so none of their blocks may have been written again.
    for (const [i, data] of inputs.entries()) {
      const [same, inverse] = responses[i]?.outputs ?? [];
      expect(Buffer.compare(Buffer.from(same?.data ?? []), Buffer.from(data))).toBe(0);
      expect(Buffer.compare(Buffer.from(inverse?.data ?? []), Buffer.from(data.map((b) => 255 - b)))).toBe(0);
    }
  });

  it("completes a config with the model's static auto_complete_config", async () => {
    const { client } = await pythonServer(["autocomplete"]);
    const config = (await client.modelConfig({ name: "autocomplete" })).config;
    expect(config?.maxBatchSize).toBe(4);
    expect(config?.input.map((i) => [i.name, i.dims])).toEqual([["X", [3n]]]);
    expect(config?.output.map((o) => [o.name, o.dims])).toEqual([["Y", [3n]]]);
    expect(config?.schedulingChoice.case).toBe("dynamicBatching");
    const reply = await client.modelInfer({
      modelName: "autocomplete",
      inputs: [{ name: "X", datatype: "FP32", shape: [2n, 3n] }],
      rawInputContents: [fp32Bytes([1, 2, 3, 4, 5, 6])],
    });
    expect(readFp32(reply.rawOutputContents[0])).toEqual([2, 4, 6, 8, 10, 12]);
  });

  it("runs finalize on unload (every instance) and keeps other models serving", async () => {
    const { client, repo } = await pythonServer(["inspect", "add_sub"], { controlMode: "explicit", loadModels: ["*"] });
    const marker = join(repo, "finalized.txt");
    const configPath = join(repo, "inspect", "config.pbtxt");
    const { writeFileSync } = await import("node:fs");
    writeFileSync(
      configPath,
      readFileSync(configPath, "utf8").replace('string_value: ""', `string_value: "${marker}"`),
    );
    await client.repositoryModelLoad({ modelName: "inspect" });
    await client.repositoryModelUnload({ modelName: "inspect" });
    await waitFor(() => readFileSync(marker, "utf8").split("\n").filter(Boolean).length === 2, { what: "finalize" });
    expect(readFileSync(marker, "utf8").split("\n").filter(Boolean).sort()).toEqual(["inspect_0_0", "inspect_0_1"]);
    expect(readFp32((await client.modelInfer(addSubRequest([1, 1, 1, 1], [1, 1, 1, 1]))).rawOutputContents[0])).toEqual(
      [2, 2, 2, 2],
    );
    await waitFor(() => ours().length === 1, { what: "the unloaded model's processes to end" });
  });
});
