// Model warmup over the real server: a model becomes READY only after its samples ran, and a
// sample that cannot run fails the load with Triton's message, never a JavaScript one.
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import {
  cleanup,
  copyModel,
  int32Bytes,
  readInt32,
  recordingLog,
  startServer,
  tempRepository,
} from "./support/harness.js";

afterEach(cleanup);

function withWarmup(repo: string, model: string, warmup: string): void {
  const config = join(repo, model, "config.pbtxt");
  writeFileSync(config, `${readFileSync(config, "utf8")}\n${warmup}\n`);
}

describe("model warmup", () => {
  it("runs zero, random and file samples before the models are READY", async () => {
    const repo = tempRepository();
    copyModel("simple", repo);
    copyModel("mlp_classifier", repo);
    mkdirSync(join(repo, "simple", "warmup"), { recursive: true });
    writeFileSync(join(repo, "simple", "warmup", "ones.bin"), int32Bytes(new Array(16).fill(1)));
    withWarmup(
      repo,
      "simple",
      `model_warmup [
        { name: "zeros" batch_size: 2 count: 3 inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } }
                                              inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } },
        { name: "file" batch_size: 1 inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "ones.bin" } }
                                     inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] random_data: true } } }
      ]`,
    );
    withWarmup(
      repo,
      "mlp_classifier",
      `model_warmup { name: "random" batch_size: 8 inputs { key: "INPUT" value { data_type: TYPE_FP32 dims: [ 64 ] random_data: true } } }`,
    );
    const { client, failedModels, server } = await startServer({ modelRepositories: [repo] });
    expect(failedModels).toEqual([]);
    expect(server.core.isReady()).toBe(true);
    // Warmup runs on the instances directly: statistics count client requests only.
    const stats = (await client.modelStatistics({ name: "simple" })).modelStats[0];
    expect(stats?.inferenceCount).toBe(0n);
    const response = await client.modelInfer({
      modelName: "simple",
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1n, 16n] },
        { name: "INPUT1", datatype: "INT32", shape: [1n, 16n] },
      ],
      rawInputContents: [int32Bytes(new Array(16).fill(2)), int32Bytes(new Array(16).fill(3))],
    });
    expect(readInt32(response.rawOutputContents[0])).toEqual(new Array(16).fill(5));
  });

  it("fails the load with Triton's message when a sample cannot run, and the model is not READY", async () => {
    const repo = tempRepository();
    copyModel("simple", repo);
    mkdirSync(join(repo, "simple", "warmup"), { recursive: true });
    writeFileSync(join(repo, "simple", "warmup", "short.bin"), new Uint8Array(10));
    withWarmup(
      repo,
      "simple",
      `model_warmup { name: "short" batch_size: 1
        inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "short.bin" } }
        inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } }`,
    );
    const { log } = recordingLog();
    const { client, failedModels, server } = await startServer({ modelRepositories: [repo], log });
    expect(failedModels).toEqual(["simple"]);
    expect(server.core.isReady()).toBe(false);
    const index = await client.repositoryIndex({});
    expect(index.models.find((m) => m.name === "simple")).toMatchObject({
      state: "UNAVAILABLE",
      reason:
        "[request id: <id_unknown>] warmup setting expects 64 bytes, but the data provided from short.binonly has 10 bytes",
    });
  });
});

/** Texts of JavaScript's own errors, which must never be a load's reason. */
const JS_ERROR =
  /Cannot read properties|undefined|is not a function|is not iterable|TypeError|RangeError|Invalid (typed )?array length|ENOENT|EISDIR/;

/** Models of each kind a sample meets: ONNX with a batch dimension, JavaScript without, ONNX BYTES. */
const BASES = ["simple", "add_sub", "simple_string"] as const;
type Base = (typeof BASES)[number] | "simple_identity";

/** One warm-up input of a hostile sample, in config text. */
function input(key: string, type: string, dims: string, source: string): string {
  return `inputs { key: "${key}" value { data_type: ${type} ${dims} ${source} } }`;
}

/** A `model_warmup` entry of one sample. */
function sample(fields: string, ...inputs: string[]): string {
  return `model_warmup { name: "w" ${fields} ${inputs.join(" ")} }`;
}

const Z = "zero_data: true";
/** The right inputs of each base model, for samples that break one thing only. */
const RIGHT: Record<(typeof BASES)[number], [string, string][]> = {
  simple: [
    ["INPUT0", "TYPE_INT32"],
    ["INPUT1", "TYPE_INT32"],
  ],
  add_sub: [
    ["INPUT0", "TYPE_FP32"],
    ["INPUT1", "TYPE_FP32"],
  ],
  simple_string: [
    ["INPUT0", "TYPE_STRING"],
    ["INPUT1", "TYPE_STRING"],
  ],
};
const DIMS: Record<(typeof BASES)[number], string> = {
  simple: "dims: [16]",
  add_sub: "dims: [4]",
  simple_string: "dims: [16]",
};

/** Samples that each break one rule: `[case, sample text]` for a base model. */
function hostileSamples(base: (typeof BASES)[number]): [string, string][] {
  const [[a, typeA], [b, typeB]] = RIGHT[base] as [[string, string], [string, string]];
  const dims = DIMS[base];
  const second = input(b, typeB, dims, Z);
  const withFirst = (type: string, d: string, source: string) =>
    sample("batch_size: 1", input(a, type, d, source), second);
  return [
    ["no inputs", sample("batch_size: 1")],
    ["one input missing", sample("batch_size: 1", second)],
    ["only an unknown input", sample("batch_size: 1", input("BOGUS", typeA, dims, Z))],
    ["an empty input name", sample("batch_size: 1", input("", typeA, dims, Z))],
    [
      "an input without a value",
      `model_warmup { name: "w" batch_size: 1 inputs { key: "${a}" } inputs { key: "${b}" } }`,
    ],
    ["no dims", withFirst(typeA, "", Z)],
    ["wrong dims", withFirst(typeA, "dims: [3]", Z)],
    ["a zero dim", withFirst(typeA, "dims: [0]", Z)],
    ["a variable dim", withFirst(typeA, "dims: [-1]", Z)],
    ["an invalid dim", withFirst(typeA, "dims: [-7]", Z)],
    ["a huge dim", withFirst(typeA, "dims: [100000000000]", Z)],
    ["an overflowing shape", withFirst(typeA, "dims: [4611686018427387904, 4]", Z)],
    ["no data type", withFirst("TYPE_INVALID", dims, Z)],
    ["an unknown data type number", withFirst("99", dims, Z)],
    ["the wrong data type", withFirst(typeA === "TYPE_FP32" ? "TYPE_INT32" : "TYPE_FP32", dims, Z)],
    ["BYTES zero data", withFirst("TYPE_STRING", dims, Z)],
    ["BYTES random data", withFirst("TYPE_STRING", dims, "random_data: true")],
    ["BOOL random data", withFirst("TYPE_BOOL", dims, "random_data: true")],
    ["no data source", withFirst(typeA, dims, "")],
    ["a missing file", withFirst(typeA, dims, 'input_data_file: "nope.bin"')],
    ["a file outside the folder", withFirst(typeA, dims, 'input_data_file: "../config.pbtxt"')],
    ["an absolute file", withFirst(typeA, dims, 'input_data_file: "/etc/passwd"')],
    ["an empty file name", withFirst(typeA, dims, 'input_data_file: ""')],
    ["a folder as the file", withFirst(typeA, dims, 'input_data_file: "."')],
    ["a link out of the folder", withFirst(typeA, dims, 'input_data_file: "link.bin"')],
    ["a short file", withFirst(typeA, dims, 'input_data_file: "short.bin"')],
    ["a file of BYTES that are not", withFirst("TYPE_STRING", dims, 'input_data_file: "ones.bin"')],
    ["batch_size over max_batch_size", sample("batch_size: 100", input(a, typeA, dims, Z), second)],
    ["the largest batch_size", sample("batch_size: 4294967295", input(a, typeA, dims, Z), second)],
  ];
}

/** A repository holding `base` once per sample (`<base>_<n>`), with the files the samples name. */
function hostileRepository(samples: readonly { base: Base; text: string }[]): {
  repo: string;
  names: string[];
} {
  const repo = tempRepository();
  const names = samples.map(({ base, text }, i) => {
    const name = `${base}_${i}`;
    const folder = copyModel(base, repo, name);
    const config = join(folder, "config.pbtxt");
    const original = readFileSync(config, "utf8").replace(/^name: "[^"]*"/m, `name: "${name}"`);
    writeFileSync(config, `${original}\n${text}\n`);
    mkdirSync(join(folder, "warmup"));
    writeFileSync(join(folder, "warmup", "ones.bin"), new Uint8Array(64).fill(1));
    writeFileSync(join(folder, "warmup", "short.bin"), new Uint8Array(3));
    symlinkSync("/etc/passwd", join(folder, "warmup", "link.bin"));
    return name;
  });
  return { repo, names };
}

/** Load every sample's model in one server; each load's state and reason, in the samples' order. */
async function loadAll(samples: readonly { base: Base; text: string }[]) {
  const { repo, names } = hostileRepository(samples);
  const { client } = await startServer({ modelRepositories: [repo], log: recordingLog().log });
  const index = await client.repositoryIndex({});
  const rows = new Map(index.models.map((m) => [m.name, m]));
  return { repo, loaded: names.map((name, i) => ({ name, text: samples[i]?.text ?? "", row: rows.get(name) })) };
}

describe("hostile warm-up configs", () => {
  it("fail the load with Triton's message, never a JavaScript error", async () => {
    const samples: { base: Base; what: string; text: string }[] = BASES.flatMap((base) =>
      hostileSamples(base).map(([what, text]) => ({ base, what, text })),
    );
    // Zero and random data for BYTES are empty strings, as in Triton: a model that takes any string runs them.
    for (const source of [Z, "random_data: true"]) {
      const text = sample("batch_size: 2", input("INPUT0", "TYPE_STRING", "dims: [16]", source));
      samples.push({ base: "simple_identity", what: source, text });
    }
    const { repo, loaded } = await loadAll(samples);
    const byCase = new Map<string, { name: string; reason: string }>();
    for (const [i, { name, row }] of loaded.entries()) {
      const what = `${samples[i]?.what} (${name})`;
      expect(row?.state, what).toBe(samples[i]?.base === "simple_identity" ? "READY" : "UNAVAILABLE");
      expect(row?.reason ?? "", what).not.toMatch(JS_ERROR);
      if (row?.state === "UNAVAILABLE") expect(row.reason, what).not.toBe("");
      byCase.set(`${samples[i]?.base}: ${samples[i]?.what}`, { name, reason: row?.reason ?? "" });
    }
    const reason = (key: string) => byCase.get(key)?.reason;
    const name = (key: string) => byCase.get(key)?.name;
    const id = "[request id: <id_unknown>]";
    expect(reason("add_sub: no inputs")).toBe(
      `${id} expected 2 inputs but got 0 inputs for model '${name("add_sub: no inputs")}'. Got input(s) [], but missing required input(s) ['INPUT0', 'INPUT1']. Please provide all required input(s).`,
    );
    expect(reason("simple: the wrong data type")).toBe(
      `${id} inference input 'INPUT0' data-type is 'FP32', but model '${name("simple: the wrong data type")}' expects 'INT32'`,
    );
    expect(reason("simple: a variable dim")).toBe(
      "warmup setting expects all variable-size dimensions are specified for input 'INPUT0'",
    );
    expect(reason("simple: an invalid dim")).toBe("tensor 'INPUT0' contains an invalid dimension [-7]");
    expect(reason("simple: an overflowing shape")).toBe(
      "byte size for tensor 'INPUT0' exceeds maximum size of 9223372036854775807",
    );
    expect(reason("simple: no data source")).toBe(
      `${id} warmup setting expects input 'INPUT0' to have input_data_type set`,
    );
    expect(reason("simple: a missing file")).toBe(
      `failed to open text file for read ${join(repo, name("simple: a missing file") ?? "", "warmup", "nope.bin")}: No such file or directory`,
    );
    expect(reason("simple: batch_size over max_batch_size")).toBe(
      `failed to run warmup sample 'w': batch size 100 for '${name("simple: batch_size over max_batch_size")}', max allowed is 8; `,
    );
    expect(reason("add_sub: batch_size over max_batch_size")).toBe(
      `failed to run warmup sample 'w': batch size 100 for '${name("add_sub: batch_size over max_batch_size")}', max allowed is 0; `,
    );
  }, 60_000);

  it("fuzzed: every load is READY or fails with a message that is not a JavaScript error", async () => {
    // Mostly the model's own inputs, types and dims, so that many samples reach the model.
    const warmup = fc.constantFrom(...BASES).chain((base) => {
      const right = new Map(RIGHT[base]);
      const warmupInput = fc
        .tuple(
          fc.constantFrom(...right.keys(), "BOGUS", ""),
          fc.option(
            fc.constantFrom(
              "TYPE_INT32",
              "TYPE_FP32",
              "TYPE_STRING",
              "TYPE_BOOL",
              "TYPE_FP16",
              "TYPE_BF16",
              "TYPE_INVALID",
              "42",
            ),
            { freq: 2 },
          ),
          fc.option(
            fc.array(fc.constantFrom("-2", "-1", "0", "1", "4", "16", "100000000000", "9223372036854775807"), {
              maxLength: 3,
            }),
            { freq: 2 },
          ),
          fc.constantFrom(
            "",
            Z,
            Z,
            "random_data: true",
            "random_data: true",
            'input_data_file: "ones.bin"',
            'input_data_file: "short.bin"',
            'input_data_file: "nope.bin"',
            'input_data_file: "../config.pbtxt"',
            'input_data_file: "link.bin"',
            'input_data_file: "."',
          ),
        )
        .map(([key, type, dims, source]) =>
          input(
            key,
            type ?? right.get(key) ?? "TYPE_INT32",
            dims ? (dims.length > 0 ? `dims: [${dims.join(", ")}]` : "") : DIMS[base],
            source,
          ),
        );
      return fc
        .tuple(fc.integer({ min: 0, max: 10 }), fc.integer({ min: 0, max: 2 }), fc.array(warmupInput, { maxLength: 3 }))
        .map(([batch, count, inputs]) => ({ base, text: sample(`batch_size: ${batch} count: ${count}`, ...inputs) }));
    });
    const samples = fc.sample(warmup, { numRuns: 60, seed: 45 });
    const states = new Set<string>();
    for (const { name, text, row } of (await loadAll(samples)).loaded) {
      expect(row?.state, `${name}: ${text}`).toMatch(/^(READY|UNAVAILABLE)$/);
      expect(row?.reason ?? "", `${name}: ${text}`).not.toMatch(JS_ERROR);
      states.add(row?.state ?? "");
    }
    // The corpus reaches both ends: models that warmed up and loads that failed.
    expect([...states].sort()).toEqual(["READY", "UNAVAILABLE"]);
  }, 60_000);
});
