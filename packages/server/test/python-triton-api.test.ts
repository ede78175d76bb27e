// Triton's pb_utils as Triton's own models use it (issue 48): model control from a model, the
// initialize args, arguments refused as Triton's bindings refuse them, custom metrics' rules, BLS
// requests built from bytes, response parameters' rules, relative imports, and a non-decoupled
// model answering through its response sender (what a client gets when that model then fails, as
// Triton's frontends do).
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { copyPythonModels, PYTHON_FIXTURES, pythonWithNumpy } from "./python-harness.js";
import {
  bytesTensor,
  cleanup,
  pushable,
  readBytesTensor,
  recordingLog,
  startServer,
  tempRepository,
} from "./support/harness.js";

const python = pythonWithNumpy();

afterEach(cleanup);

/** Run `model_control`'s script: each step's result, as the model saw it. */
async function control(client: Awaited<ReturnType<typeof startServer>>["client"], script: unknown[]) {
  const reply = await client.modelInfer({
    modelName: "model_control",
    inputs: [{ name: "COMMAND", datatype: "BYTES", shape: [1n] }],
    rawInputContents: [bytesTensor([JSON.stringify(script)])],
  });
  return JSON.parse(readBytesTensor(reply.rawOutputContents[0])[0] ?? "") as unknown[];
}

describe("Triton's pb_utils API", () => {
  it("load_model / unload_model / is_model_ready drive the server's repository (explicit mode)", async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["model_control", "identity"]);
    const { client, failedModels } = await startServer({
      modelRepositories: [repo],
      pythonExecutable: python,
      controlMode: "explicit",
      loadModels: ["model_control", "identity"],
    });
    expect(failedModels).toEqual([]);
    // A model made from a config and a file given in the call, as Triton's load API takes them.
    const source = readFileSync(join(PYTHON_FIXTURES, "identity/1/model.py"), "utf8");
    const config = JSON.stringify({
      name: "made",
      backend: "python",
      input: [{ name: "INPUT0", data_type: "TYPE_UINT8", dims: [-1] }],
      output: [{ name: "OUTPUT0", data_type: "TYPE_UINT8", dims: [-1] }],
    });
    const results = await control(client, [
      ["ready", "identity"],
      ["ready", "nope"],
      ["unload", "identity"],
      ["ready", "identity"],
      ["load", "identity"],
      ["ready", "identity", "1"],
      ["load", "nope"],
      ["load", "made", config, { "file:1/model.py": source }],
      ["ready", "made"],
    ]);
    expect(results.slice(0, 6)).toEqual([true, false, "unloaded", false, "loaded", true]);
    expect(results[6]).toMatch(/^error: .*nope/);
    expect(results.slice(7)).toEqual(["loaded", true]);
    const made = await client.modelInfer({
      modelName: "made",
      inputs: [{ name: "INPUT0", datatype: "UINT8", shape: [3n] }],
      rawInputContents: [Uint8Array.of(7, 8, 9)],
    });
    expect([...(made.rawOutputContents[0] ?? [])]).toEqual([7, 8, 9]);
  });

  it("load_model is refused outside explicit model control, with the repository's message", async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["model_control"]);
    const { client } = await startServer({ modelRepositories: [repo], pythonExecutable: python });
    const [loaded] = await control(client, [["load", "model_control"]]);
    expect(loaded).toBe("error: explicit model load / unload is not allowed if polling is enabled");
  });

  it("gives initialize the instance's kind as Triton's Python backend words it (MODEL, not KIND_MODEL)", async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["inspect"]);
    const config = join(repo, "inspect", "config.pbtxt");
    writeFileSync(config, readFileSync(config, "utf8").replace("count: 2 kind: KIND_CPU", "count: 1 kind: KIND_MODEL"));
    const { client, failedModels } = await startServer({ modelRepositories: [repo], pythonExecutable: python });
    expect(failedModels).toEqual([]);
    const reply = await client.modelInfer({
      modelName: "inspect",
      inputs: [{ name: "IN", datatype: "FP32", shape: [2n, 2n] }],
      outputs: [{ name: "INFO" }],
      rawInputContents: [new Uint8Array(new Float32Array(4).buffer)],
    });
    const info = JSON.parse(readBytesTensor(reply.rawOutputContents[0])[0] ?? "");
    expect(info.args.model_instance_kind).toBe("MODEL");
  });

  it("imports model.py as Triton does (`1.model`), so relative imports find its version folder", async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["relative_import"]);
    const { client, failedModels } = await startServer({ modelRepositories: [repo], pythonExecutable: python });
    expect(failedModels).toEqual([]);
    const reply = await client.modelInfer({
      modelName: "relative_import",
      inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }],
      rawInputContents: [new Uint8Array(Int32Array.of(1).buffer)],
    });
    expect(JSON.parse(readBytesTensor(reply.rawOutputContents[0])[0] ?? "")).toEqual({
      module: "1.model",
      value: 201,
      shared: "shared",
    });
  });

  it("words BLS calls refused before they run as Triton's stub does, wants model_name, inputs and outputs, and loops over a finished stream again", async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["bls_refused", "identity", "repeat_int32"]);
    const { client, failedModels } = await startServer({ modelRepositories: [repo], pythonExecutable: python });
    expect(failedModels).toEqual([]);
    const reply = await client.modelInfer({
      modelName: "bls_refused",
      inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }],
      rawInputContents: [new Uint8Array(Int32Array.of(1).buffer)],
    });
    const unknown =
      "Model non_existent_model - Error when running inference: Request for unknown model: 'non_existent_model' is not found";
    expect(JSON.parse(readBytesTensor(reply.rawOutputContents[0])[0] ?? "")).toEqual({
      exec: unknown,
      decoupled: [unknown],
      unexpected_input: expect.stringMatching(
        /^Model identity - Error when running inference: \[request id: .*\] unexpected inference input 'NOT_AN_INPUT' for model 'identity'$/,
      ),
      no_model_name: "TypeError",
      no_inputs: "TypeError",
      no_outputs: "TypeError",
      // next() then a loop, then a second loop from the first response again (Triton's iterator).
      loops: [
        [5, 6, 7],
        [5, 6, 7],
      ],
    });
  });

  it("passes a unittest model of Triton's kind: argument checks, histogram buckets, a metric outliving its family", async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["pb_unittest"]);
    const { client, failedModels, metricsUrl } = await startServer({
      modelRepositories: [repo],
      pythonExecutable: python,
      metrics: true,
    });
    expect(failedModels).toEqual([]);
    const reply = await client.modelInfer({
      modelName: "pb_unittest",
      inputs: [{ name: "INPUT0", datatype: "FP16", shape: [1n] }],
      rawInputContents: [new Uint8Array(2)],
    });
    const report = readBytesTensor(reply.rawOutputContents[1])[0] ?? "";
    // OUTPUT0 is wasSuccessful() as FP16: 1.0 is 0x3c00.
    expect([Buffer.from(reply.rawOutputContents[0] ?? []).readUInt16LE(0), report]).toEqual([
      0x3c00,
      expect.stringMatching(/\nOK\n$/),
    ]);
    const metrics = await (await fetch(`${metricsUrl}/metrics`)).text();
    // A family deleted with its metrics is gone; a kept one shows its labels as Triton orders them.
    expect(metrics).not.toContain("pb_unittest_gone_gauge");
    expect(metrics).toContain('pb_unittest_kept{a="1",b="2"} 7\n');
    expect(metrics).toContain("# TYPE pb_unittest_gone_counter gauge\n");
  });

  describe("a non-decoupled model's response sender", () => {
    const send = (client: Awaited<ReturnType<typeof startServer>>["client"], n: number) =>
      client.modelInfer({
        modelName: "sender_late",
        inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }],
        rawInputContents: [new Uint8Array(Int32Array.of(n).buffer)],
      });
    const value = (reply: Awaited<ReturnType<typeof send>>) =>
      new Int32Array((reply.rawOutputContents[0] as Uint8Array).slice().buffer)[0];

    it("answers with the response once the final flag comes, with it or apart, during execute or after", async () => {
      const repo = tempRepository();
      copyPythonModels(repo, ["sender_late"]);
      const { client } = await startServer({ modelRepositories: [repo], pythonExecutable: python });
      for (const n of [1, 2, 3, 10]) {
        const reply = await send(client, n);
        expect(value(reply), `IN=${n}`).toBe(n * 10);
        expect(reply.parameters.how?.parameterChoice.value, `IN=${n}`).toBe(BigInt(n));
      }
    });

    it("refuses misuse with Triton's words; a sender dropped before the final flag fails its request", async () => {
      const repo = tempRepository();
      copyPythonModels(repo, ["sender_late"]);
      const { client } = await startServer({ modelRepositories: [repo], pythonExecutable: python });
      const refusals: [number, string][] = [
        [4, "Unable to send response. Non-decoupled model cannot send complete final before sending a response."],
        [8, "Unable to send response. Unsupported flag provided."],
        [9, "the response sender of the request was dropped before it sent the final flag"],
      ];
      for (const [n, words] of refusals) await expect(send(client, n), `IN=${n}`).rejects.toThrow(words);
      // The instance goes on serving.
      expect(value(await send(client, 1))).toBe(10);
    });

    // Triton passes a sent response on at once; what the model does wrong after it comes second.
    it("keeps a response its final flag ended when execute then raises (Triton logs the error)", async () => {
      const repo = tempRepository();
      copyPythonModels(repo, ["sender_late"]);
      const { log, lines } = recordingLog();
      const { client } = await startServer({ modelRepositories: [repo], pythonExecutable: python, log });
      // 6: sent with the final flag, then returned too; 7: the final flag sent twice.
      for (const n of [6, 7]) expect(value(await send(client, n)), `IN=${n}`).toBe(n * 10);
      const logged = lines.join("\n");
      expect(logged).toContain("Non-decoupled model cannot send more than one response.");
      expect(logged).toContain("Unable to send response. Response sender has been closed.");
    });

    it("a response sent, then a failure: ModelInfer and REST answer Triton's 'expected a single response, got 2', a stream writes the response", async () => {
      const repo = tempRepository();
      copyPythonModels(repo, ["sender_late"]);
      const { log, lines } = recordingLog();
      const { client, httpUrl } = await startServer({
        modelRepositories: [repo],
        pythonExecutable: python,
        log,
        http: true,
      });
      // 5: a second response raises; 11: execute raises after sending one.
      for (const n of [5, 11]) {
        await expect(send(client, n), `IN=${n}`).rejects.toThrow("expected a single response, got 2");
        const rest = await fetch(`${httpUrl}/v2/models/sender_late/infer`, {
          method: "POST",
          body: JSON.stringify({ inputs: [{ name: "IN", datatype: "INT32", shape: [1], data: [n] }] }),
        });
        expect(rest.status, `IN=${n}`).toBe(500);
        expect(await rest.json()).toEqual({ error: "expected a single response, got 2" });
      }
      // Triton's ModelStreamInfer writes a one-response request's first response and drops the rest.
      const input = pushable<Parameters<typeof client.modelInfer>[0]>();
      for (const n of [5, 11]) {
        input.push({
          modelName: "sender_late",
          id: String(n),
          inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }],
          rawInputContents: [new Uint8Array(Int32Array.of(n).buffer)],
        });
      }
      input.end();
      const streamed: [string, number | undefined, string][] = [];
      for await (const r of client.modelStreamInfer(input)) {
        const raw = r.inferResponse?.rawOutputContents[0];
        streamed.push([
          r.inferResponse?.id ?? "",
          raw ? new Int32Array(raw.slice().buffer)[0] : undefined,
          r.errorMessage,
        ]);
      }
      expect(streamed.sort()).toEqual([
        ["11", 110, ""],
        ["5", 50, ""],
      ]);
      const logged = lines.join("\n");
      expect(logged).toContain("Non-decoupled model cannot send more than one response.");
      expect(logged).toContain("ValueError: failed after sending");
      // The instance goes on serving.
      expect(value(await send(client, 1))).toBe(10);
    });
  });
});
