// Outputs come back as the model made them (issue 48, items 2 and 17): Triton's core checks only
// that an output's name is the model's (InferenceResponse::AddOutput), so an INT64 sum into a
// TYPE_INT32 output (NVIDIA's bls_decoupled) or an FP16 result into TYPE_FP32 is returned with its
// own datatype and shape; an ensemble whose composing model left an output out returns the ones
// that were made and logs `Composing models did not output tensor <name>`.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../src/index.js";
import { cleanup, startServer, tempRepository } from "./support/harness.js";

afterEach(cleanup);

const CONFIG = `max_batch_size: 0
  input { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] }
  output { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] }
  output { name: "HALF" data_type: TYPE_FP32 dims: [ 2 ] }`;

/** SUM as INT64 (the config says INT32), HALF as FP16 (the config says FP32); IN[0] = 0 leaves HALF out. */
const MODEL = `export default class AsMade {
  execute(requests) {
    return requests.map((r) => {
      const [a, b] = r.input("IN").typed();
      const sum = { name: "SUM", datatype: "INT64", shape: [1], data: BigInt64Array.of(BigInt(a + b)) };
      const half = { name: "HALF", datatype: "FP16", shape: [2], data: Uint16Array.of(0x3c00, 0x4000) };
      return { outputs: a === 0 ? [sum] : [sum, half] };
    });
  }
}`;

function repository(): string {
  const repo = tempRepository();
  mkdirSync(join(repo, "as_made", "1"), { recursive: true });
  writeFileSync(join(repo, "as_made", "config.pbtxt"), `name: "as_made" backend: "js" ${CONFIG}`);
  writeFileSync(join(repo, "as_made", "1", "model.mjs"), MODEL);
  mkdirSync(join(repo, "pipeline", "1"), { recursive: true });
  writeFileSync(
    join(repo, "pipeline", "config.pbtxt"),
    `platform: "ensemble" max_batch_size: 0
     input { name: "X" data_type: TYPE_INT32 dims: [ 2 ] }
     output { name: "TOTAL" data_type: TYPE_INT32 dims: [ 1 ] }
     output { name: "HALVES" data_type: TYPE_FP32 dims: [ 2 ] }
     ensemble_scheduling { step { model_name: "as_made" model_version: -1
       input_map { key: "IN" value: "X" }
       output_map { key: "SUM" value: "TOTAL" } output_map { key: "HALF" value: "HALVES" } } }`,
  );
  return repo;
}

async function post(url: string, path: string, body: unknown): Promise<{ status: number; json: unknown }> {
  const reply = await fetch(`${url}${path}`, { method: "POST", body: JSON.stringify(body) });
  return { status: reply.status, json: await reply.json() };
}

const input = (a: number, b: number) => ({ name: "IN", datatype: "INT32", shape: [2], data: [a, b] });

describe("outputs as the model made them", () => {
  it("returns an INT64 result for a TYPE_INT32 output with its own datatype, over REST and gRPC", async () => {
    const { httpUrl, client } = await startServer({ modelRepositories: [repository()], http: true });
    const rest = await post(httpUrl as string, "/v2/models/as_made/infer", {
      inputs: [input(20, 22)],
      outputs: [{ name: "SUM" }],
    });
    expect(rest).toEqual({
      status: 200,
      json: {
        model_name: "as_made",
        model_version: "1",
        outputs: [{ name: "SUM", datatype: "INT64", shape: [1], data: [42] }],
      },
    });
    const grpc = await client.modelInfer({
      modelName: "as_made",
      inputs: [{ name: "IN", datatype: "INT32", shape: [2n] }],
      rawInputContents: [new Uint8Array(Int32Array.of(20, 22).buffer)],
    });
    expect(grpc.outputs.map((o) => [o.name, o.datatype, o.shape])).toEqual([
      ["SUM", "INT64", [1n]],
      ["HALF", "FP16", [2n]],
    ]);
    expect(new BigInt64Array((grpc.rawOutputContents[0] as Uint8Array).slice().buffer)).toEqual(BigInt64Array.of(42n));
    expect(new Uint16Array((grpc.rawOutputContents[1] as Uint8Array).slice().buffer)).toEqual(
      Uint16Array.of(0x3c00, 0x4000),
    );
  });

  it("returns an FP16 result for a TYPE_FP32 output as FP16 binary data (JSON cannot carry FP16, as in Triton)", async () => {
    const { httpUrl } = await startServer({ modelRepositories: [repository()], http: true });
    const reply = await fetch(`${httpUrl}/v2/models/as_made/infer`, {
      method: "POST",
      body: JSON.stringify({ inputs: [input(1, 2)], outputs: [{ name: "HALF", parameters: { binary_data: true } }] }),
    });
    const body = Buffer.from(await reply.arrayBuffer());
    const headerLength = Number(reply.headers.get("inference-header-content-length"));
    expect(JSON.parse(body.subarray(0, headerLength).toString())).toEqual({
      model_name: "as_made",
      model_version: "1",
      outputs: [{ name: "HALF", datatype: "FP16", shape: [2], parameters: { binary_data_size: 4 } }],
    });
    expect([...new Uint16Array(body.subarray(headerLength).buffer.slice(body.byteOffset + headerLength))]).toEqual([
      0x3c00, 0x4000,
    ]);
    const json = await post(httpUrl as string, "/v2/models/as_made/infer", {
      inputs: [input(1, 2)],
      outputs: [{ name: "HALF" }],
    });
    expect(json.status).toBe(400);
    expect(json.json).toEqual({ error: expect.stringMatching(/^sending FP16 data via JSON is not supported/) });
  });

  it("leaves out a requested output the model did not produce", async () => {
    const { httpUrl } = await startServer({ modelRepositories: [repository()], http: true });
    const rest = await post(httpUrl as string, "/v2/models/as_made/infer", {
      inputs: [input(0, 5)],
      outputs: [{ name: "SUM" }, { name: "HALF" }],
    });
    expect(rest).toEqual({
      status: 200,
      json: {
        model_name: "as_made",
        model_version: "1",
        outputs: [{ name: "SUM", datatype: "INT64", shape: [1], data: [5] }],
      },
    });
  });

  it("an ensemble returns the outputs its composing models made and logs the one they did not", async () => {
    const lines: string[] = [];
    const log = createLogger({ verboseLevel: 1, write: (line) => lines.push(line) });
    const { httpUrl } = await startServer({ modelRepositories: [repository()], http: true, log });
    const rest = await post(httpUrl as string, "/v2/models/pipeline/infer", {
      inputs: [{ name: "X", datatype: "INT32", shape: [2], data: [0, 7] }],
    });
    // (Triton's ensembles also answer with the sequence parameters.)
    expect(rest).toMatchObject({
      status: 200,
      json: {
        model_name: "pipeline",
        model_version: "1",
        outputs: [{ name: "TOTAL", datatype: "INT64", shape: [1], data: [7] }],
      },
    });
    expect(lines.some((line) => line.trimEnd().endsWith("] Composing models did not output tensor HALVES"))).toBe(true);
  });
});
