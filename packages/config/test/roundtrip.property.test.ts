import { create, equals, type MessageInitShape } from "@bufbuild/protobuf";
import {
  BatchInput_Kind,
  BatchOutput_Kind,
  DataType,
  type ModelConfig,
  ModelConfigSchema,
  type ModelDynamicBatchingSchema,
  type ModelEnsemblingSchema,
  ModelInput_Format,
  type ModelInputSchema,
  ModelInstanceGroup_Kind,
  ModelInstanceGroup_SecondaryDevice_SecondaryDeviceKind,
  type ModelInstanceGroupSchema,
  type ModelMetricsSchema,
  type ModelOptimizationPolicy_Cuda_GraphSpec_ShapeSchema,
  type ModelOptimizationPolicy_ExecutionAccelerators_AcceleratorSchema,
  ModelOptimizationPolicy_ModelPriority,
  type ModelOptimizationPolicySchema,
  type ModelOutputSchema,
  ModelQueuePolicy_TimeoutAction,
  type ModelQueuePolicySchema,
  ModelSequenceBatching_Control_Kind,
  type ModelSequenceBatching_ControlSchema,
  type ModelSequenceBatchingSchema,
  type ModelVersionPolicySchema,
  type ModelWarmupSchema,
} from "@galley/proto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseModelConfig, printModelConfig } from "../src/text-format.js";

/*
 * Property tests of the print → parse round trip over generated ModelConfig messages.
 *
 * Three inputs are deliberately kept out of the generators, each a documented limitation of
 * @bufbuild/protobuf rather than of this package; each is pinned by an example test at the end
 * of the file so a change in behaviour is noticed:
 *
 * - NaN in float/double fields. The text format has `nan` (and `inf`/`-inf`), and NaN prints and
 *   parses back as NaN, but `equals()` compares floats with IEEE semantics ("NaN does not equal
 *   NaN", its doc comment), so a message holding NaN never equals its round trip. NaN is left out
 *   of the equality property only; the stability property and an example test include it.
 *   ±Infinity and -0 are generated everywhere: they round-trip.
 * - Strings with unpaired UTF-16 surrogates. Protobuf strings are UTF-8; the writer passes a lone
 *   surrogate through raw and the reader encodes it as U+FFFD ("Unpaired surrogates become U+FFFD
 *   (the standard TextEncoder behavior), matching binary serialization", txtpb/reader). Strings
 *   here are well-formed Unicode (fast-check's "binary" unit never produces lone surrogates).
 * - The map key "__proto__". Map fields are plain objects and the reader stores entries by
 *   assignment, so `obj["__proto__"] = value` replaces the map's prototype instead of adding an
 *   entry: the entry is lost (bufbuild/protobuf-es#1451, closed unmerged as "unlikely to affect
 *   real users").
 *
 * One failing input is deliberately KEPT in the generators because it is an undocumented bug of
 * @bufbuild/protobuf 2.13.0, not a limitation: a string value that starts with U+FEFF loses that
 * character when read back. `getTextEncoding()` (wire/text-encoding.js) decodes UTF-8 with a
 * `new TextDecoder()` whose `ignoreBOM` is false, so the decoder strips a leading EF BB BF as a
 * byte-order mark. fromBinary has the same bug; fromJson does not. Until it is fixed the two
 * properties below fail (shrunk counterexample: `name: "\ufeff"` reads back as `name: ""`), and
 * so does the focused example test "a string value starting with U+FEFF keeps it".
 */

const runs = { numRuns: 300 };

// ---------------------------------------------------------------- scalars

/** Strings that exercise the text format's quoting: quotes, backslashes, controls, non-ASCII. */
const tricky = [
  "",
  '"',
  "'",
  "\\",
  '\\"',
  "\\n",
  "\n",
  "\r\n",
  "\t",
  "\0",
  "\x07\x08\x0b\x0c\x1b\x7f",
  "\x80\x85\x9f",
  "a\u2028b\u2029",
  "\ufeff",
  "\ufffd",
  "é",
  "e\u0301",
  "日本語",
  "😀👍🏽",
  "\u{10ffff}",
  "# not a comment",
  "{ } [ ] : , ; < >",
  "\\x41\\101\\u0041",
  "?\\?",
  'name: "x"\nmax_batch_size: 1',
];
const trickyChar = fc.constantFrom(
  '"',
  "'",
  "\\",
  "\n",
  "\r",
  "\t",
  "\0",
  "#",
  "?",
  "x",
  "u",
  "0",
  "7",
  "é",
  "😀",
  "\x80",
);

const text: fc.Arbitrary<string> = fc.oneof(
  fc.string({ maxLength: 12 }),
  fc.string({ unit: "binary", maxLength: 12 }),
  fc.string({ unit: trickyChar, maxLength: 12 }),
  fc.constantFrom(...tricky),
);
const name = fc.oneof(
  { weight: 3, arbitrary: fc.stringMatching(/^[A-Za-z_][\w.]{0,10}$/) },
  { weight: 2, arbitrary: text },
);
/** Map keys: anything except "__proto__" (see the header comment); Object.prototype names are fine. */
const mapKey = fc
  .oneof(name, fc.constantFrom("constructor", "toString", "hasOwnProperty", "valueOf", "0", "1", "-1", ""))
  .filter((key) => key !== "__proto__");

const int32 = fc.oneof(
  fc.integer(),
  fc.constantFrom(-1, 0, 1, 2 ** 31 - 1, -(2 ** 31)),
  fc.integer({ min: -4, max: 64 }),
);
const uint32 = fc.oneof(fc.integer({ min: 0, max: 2 ** 32 - 1 }), fc.constantFrom(0, 1, 2 ** 31, 2 ** 32 - 1));
const int64Min = -(2n ** 63n);
const int64Max = 2n ** 63n - 1n;
const uint64Max = 2n ** 64n - 1n;
const int64 = fc.oneof(
  fc.bigInt({ min: -1n, max: 1024n }),
  fc.bigInt({ min: int64Min, max: int64Max }),
  fc.constantFrom(-1n, 0n, int64Min, int64Max, 2n ** 53n + 1n, -(2n ** 53n) - 1n),
);
const uint64 = fc.oneof(
  fc.bigInt({ min: 0n, max: 100_000n }),
  fc.bigInt({ min: 0n, max: uint64Max }),
  fc.constantFrom(0n, 2n ** 32n, int64Max, 2n ** 63n, uint64Max),
);
/** 32-bit floats incl. ±Infinity, -0 and subnormals; NaN only when asked for (see the header). */
const float32 = (nan: boolean) => fc.float({ noNaN: !nan }).map(Math.fround);
const float64 = (nan: boolean) => fc.double({ noNaN: !nan });

/** Every declared value of a TypeScript enum, plus (rarely) an undeclared int32: proto3 enums are open. */
function enumOf(e: Record<string, string | number>): fc.Arbitrary<number> {
  const declared = Object.values(e).filter((v): v is number => typeof v === "number");
  return fc.oneof({ weight: 19, arbitrary: fc.constantFrom(...declared) }, { weight: 1, arbitrary: fc.integer() });
}
const dataType = enumOf(DataType);

const list = <T>(item: fc.Arbitrary<T>, maxLength = 3) => fc.array(item, { maxLength });
/** A map field's init value: an object with unique keys. */
function mapOf<V>(key: fc.Arbitrary<string>, value: fc.Arbitrary<V>, maxKeys = 3): fc.Arbitrary<Record<string, V>> {
  return fc
    .uniqueArray(fc.tuple(key, value), { maxLength: maxKeys, selector: ([k]) => k })
    .map((entries) => Object.fromEntries(entries));
}
/** A message init whose fields are each present or absent (absent = default). */
function some<T>(model: { [K in keyof T]: fc.Arbitrary<T[K]> }): fc.Arbitrary<Partial<T>> {
  return fc.record(model, { requiredKeys: [] }) as fc.Arbitrary<Partial<T>>;
}

type Init<S extends Parameters<typeof create>[0]> = MessageInitShape<S>;

// ---------------------------------------------------------------- messages

const dims = list(int64, 5);
const reshape = some({ shape: list(int64, 4) });

const modelInput: fc.Arbitrary<Init<typeof ModelInputSchema>> = some({
  name,
  dataType,
  format: enumOf(ModelInput_Format),
  dims,
  reshape,
  isShapeTensor: fc.boolean(),
  allowRaggedBatch: fc.boolean(),
  optional: fc.boolean(),
  isNonLinearFormatIo: fc.boolean(),
});

const modelOutput: fc.Arbitrary<Init<typeof ModelOutputSchema>> = some({
  name,
  dataType,
  dims,
  reshape,
  labelFilename: text,
  isShapeTensor: fc.boolean(),
  isNonLinearFormatIo: fc.boolean(),
});

const batchInput = some({
  kind: enumOf(BatchInput_Kind),
  targetName: list(name),
  dataType,
  sourceInput: list(name),
});

const batchOutput = some({ targetName: list(name), kind: enumOf(BatchOutput_Kind), sourceInput: list(name) });

const instanceGroup: fc.Arbitrary<Init<typeof ModelInstanceGroupSchema>> = some({
  name,
  kind: enumOf(ModelInstanceGroup_Kind),
  count: int32,
  rateLimiter: some({
    resources: list(some({ name, global: fc.boolean(), count: uint32 })),
    priority: uint32,
  }),
  gpus: list(int32, 4),
  secondaryDevices: list(
    some({ kind: enumOf(ModelInstanceGroup_SecondaryDevice_SecondaryDeviceKind), deviceId: int64 }),
    2,
  ),
  profile: list(text),
  passive: fc.boolean(),
  hostPolicy: text,
});

const versionPolicy: fc.Arbitrary<Init<typeof ModelVersionPolicySchema>> = fc.record({
  policyChoice: fc.oneof(
    fc.constant({ case: undefined }),
    fc.record({ case: fc.constant("latest" as const), value: some({ numVersions: uint32 }) }),
    fc.record({ case: fc.constant("all" as const), value: fc.constant({}) }),
    fc.record({ case: fc.constant("specific" as const), value: some({ versions: list(int64, 4) }) }),
  ),
});

const queuePolicy: fc.Arbitrary<Init<typeof ModelQueuePolicySchema>> = some({
  timeoutAction: enumOf(ModelQueuePolicy_TimeoutAction),
  defaultTimeoutMicroseconds: uint64,
  allowTimeoutOverride: fc.boolean(),
  maxQueueSize: uint32,
});

const dynamicBatching: fc.Arbitrary<Init<typeof ModelDynamicBatchingSchema>> = some({
  preferredBatchSize: list(int32, 4),
  maxQueueDelayMicroseconds: uint64,
  preserveOrdering: fc.boolean(),
  priorityLevels: uint64,
  defaultPriorityLevel: uint64,
  defaultQueuePolicy: queuePolicy,
  // map<uint64, ModelQueuePolicy>: protobuf-es keys 64-bit map entries by their decimal string.
  priorityQueuePolicy: mapOf(
    uint64.map((k) => k.toString()),
    queuePolicy,
  ),
});

/** A sequence-batching control: START/READY/END carry one of the three false/true lists, CORRID a data type. */
const control = (nan: boolean): fc.Arbitrary<Init<typeof ModelSequenceBatching_ControlSchema>> =>
  fc
    .record(
      {
        kind: enumOf(ModelSequenceBatching_Control_Kind),
        falseTrue: fc.oneof(
          fc.constant({}),
          fc.record({ int32FalseTrue: list(int32) }),
          fc.record({ fp32FalseTrue: list(float32(nan)) }),
          fc.record({ boolFalseTrue: list(fc.boolean()) }),
          // Not meaningful to Triton, but the schema allows every list at once.
          some({ int32FalseTrue: list(int32), fp32FalseTrue: list(float32(nan)), boolFalseTrue: list(fc.boolean()) }),
        ),
        dataType,
      },
      { requiredKeys: ["falseTrue"] },
    )
    .map(({ falseTrue, ...rest }) => ({ ...rest, ...falseTrue }));

const sequenceBatching = (nan: boolean): fc.Arbitrary<Init<typeof ModelSequenceBatchingSchema>> =>
  some({
    strategyChoice: fc.oneof(
      fc.constant({ case: undefined }),
      fc.record({
        case: fc.constant("direct" as const),
        value: some({ maxQueueDelayMicroseconds: uint64, minimumSlotUtilization: float32(nan) }),
      }),
      fc.record({
        case: fc.constant("oldest" as const),
        value: some({
          maxCandidateSequences: int32,
          preferredBatchSize: list(int32, 4),
          maxQueueDelayMicroseconds: uint64,
          preserveOrdering: fc.boolean(),
        }),
      }),
    ),
    maxSequenceIdleMicroseconds: uint64,
    controlInput: list(some({ name, control: list(control(nan)) })),
    state: list(
      some({
        inputName: name,
        outputName: name,
        dataType,
        dims,
        initialState: list(
          some({
            dataType,
            dims,
            stateData: fc.oneof(
              fc.constant({ case: undefined }),
              fc.record({ case: fc.constant("zeroData" as const), value: fc.boolean() }),
              fc.record({ case: fc.constant("dataFile" as const), value: text }),
            ),
            name,
          }),
          2,
        ),
        useSameBufferForInputOutput: fc.boolean(),
        useGrowableMemory: fc.boolean(),
      }),
      2,
    ),
    iterativeSequence: fc.boolean(),
  });

const ensembleScheduling: fc.Arbitrary<Init<typeof ModelEnsemblingSchema>> = some({
  step: list(
    some({
      modelName: name,
      modelVersion: int64,
      inputMap: mapOf(mapKey, name),
      outputMap: mapOf(mapKey, name),
      modelNamespace: text,
    }),
  ),
  maxInflightRequests: uint32,
});

const shape: fc.Arbitrary<Init<typeof ModelOptimizationPolicy_Cuda_GraphSpec_ShapeSchema>> = some({ dim: dims });
const accelerator: fc.Arbitrary<Init<typeof ModelOptimizationPolicy_ExecutionAccelerators_AcceleratorSchema>> = some({
  name,
  parameters: mapOf(mapKey, text),
});

const optimization: fc.Arbitrary<Init<typeof ModelOptimizationPolicySchema>> = some({
  graph: some({ level: int32 }),
  priority: enumOf(ModelOptimizationPolicy_ModelPriority),
  cuda: some({
    graphs: fc.boolean(),
    busyWaitEvents: fc.boolean(),
    graphSpec: list(
      some({
        batchSize: int32,
        input: mapOf(mapKey, shape, 2),
        graphLowerBound: some({ batchSize: int32, input: mapOf(mapKey, shape, 2) }),
      }),
      2,
    ),
    outputCopyStream: fc.boolean(),
  }),
  executionAccelerators: some({
    gpuExecutionAccelerator: list(accelerator, 2),
    cpuExecutionAccelerator: list(accelerator, 2),
  }),
  inputPinnedMemory: some({ enable: fc.boolean() }),
  outputPinnedMemory: some({ enable: fc.boolean() }),
  gatherKernelBufferThreshold: uint32,
  eagerBatching: fc.boolean(),
});

const modelWarmup: fc.Arbitrary<Init<typeof ModelWarmupSchema>> = some({
  name,
  batchSize: uint32,
  inputs: mapOf(
    mapKey,
    some({
      dataType,
      dims,
      inputDataType: fc.oneof(
        fc.constant({ case: undefined }),
        fc.record({ case: fc.constant("zeroData" as const), value: fc.boolean() }),
        fc.record({ case: fc.constant("randomData" as const), value: fc.boolean() }),
        fc.record({ case: fc.constant("inputDataFile" as const), value: text }),
      ),
    }),
  ),
  count: uint32,
});

const modelMetrics = (nan: boolean): fc.Arbitrary<Init<typeof ModelMetricsSchema>> =>
  some({
    metricControl: list(
      some({
        metricIdentifier: some({ family: text }),
        metricOptions: fc.oneof(
          fc.constant({ case: undefined }),
          fc.record({
            case: fc.constant("histogramOptions" as const),
            value: some({ buckets: list(float64(nan), 4) }),
          }),
        ),
      }),
      2,
    ),
  });

/** A ModelConfig touching every part of the schema; `nan` admits NaN into the float fields. */
function modelConfig(nan: boolean): fc.Arbitrary<ModelConfig> {
  return some({
    name: text,
    platform: text,
    backend: text,
    runtime: text,
    versionPolicy,
    maxBatchSize: int32,
    input: list(modelInput),
    output: list(modelOutput),
    batchInput: list(batchInput, 2),
    batchOutput: list(batchOutput, 2),
    optimization,
    schedulingChoice: fc.oneof(
      fc.constant({ case: undefined }),
      fc.record({ case: fc.constant("dynamicBatching" as const), value: dynamicBatching }),
      fc.record({ case: fc.constant("sequenceBatching" as const), value: sequenceBatching(nan) }),
      fc.record({ case: fc.constant("ensembleScheduling" as const), value: ensembleScheduling }),
    ),
    instanceGroup: list(instanceGroup),
    defaultModelFilename: text,
    ccModelFilenames: mapOf(mapKey, text),
    metricTags: mapOf(mapKey, text),
    parameters: mapOf(mapKey, some({ stringValue: text })),
    modelWarmup: list(modelWarmup, 2),
    modelOperations: some({ opLibraryFilename: list(text) }),
    modelTransactionPolicy: some({ decoupled: fc.boolean() }),
    modelRepositoryAgents: some({ agents: list(some({ name, parameters: mapOf(mapKey, text) }), 2) }),
    responseCache: some({ enable: fc.boolean() }),
    modelMetrics: modelMetrics(nan),
  }).map((init) => create(ModelConfigSchema, init as Init<typeof ModelConfigSchema>));
}

const roundTrip = (config: ModelConfig) => parseModelConfig(printModelConfig(config));

// ---------------------------------------------------------------- properties

describe("print → parse round trip over generated ModelConfig messages", () => {
  it("parse(print(m)) equals m", () => {
    fc.assert(
      fc.property(modelConfig(false), (config) => {
        const printed = printModelConfig(config);
        const parsed = parseModelConfig(printed);
        if (!equals(ModelConfigSchema, parsed, config)) {
          throw new Error(`round trip changed the message; printed text:\n${printed}`);
        }
      }),
      runs,
    );
  });

  it("printing is stable: print(parse(print(m))) === print(m), NaN included", () => {
    fc.assert(
      fc.property(modelConfig(true), (config) => {
        const printed = printModelConfig(config);
        expect(printModelConfig(parseModelConfig(printed))).toBe(printed);
      }),
      runs,
    );
  });

  it("the generators reach the whole schema", () => {
    // A guard against generators that silently stop producing parts of the schema.
    const seen = new Set<string>();
    for (const config of fc.sample(modelConfig(false), { numRuns: 300, seed: 42 })) {
      const printed = printModelConfig(config);
      for (const [, field] of printed.matchAll(/^\s*([a-z_0-9]+):/gm)) if (field) seen.add(field);
    }
    for (const field of [
      "version_policy",
      "latest",
      "all",
      "specific",
      "reshape",
      "format",
      "rate_limiter",
      "host_policy",
      "secondary_devices",
      "dynamic_batching",
      "priority_queue_policy",
      "sequence_batching",
      "direct",
      "oldest",
      "int32_false_true",
      "fp32_false_true",
      "bool_false_true",
      "initial_state",
      "ensemble_scheduling",
      "input_map",
      "model_version",
      "graph_spec",
      "graph_lower_bound",
      "gpu_execution_accelerator",
      "model_warmup",
      "zero_data",
      "random_data",
      "input_data_file",
      "response_cache",
      "model_transaction_policy",
      "metric_tags",
      "histogram_options",
    ]) {
      expect(seen, field).toContain(field);
    }
  });
});

// ---------------------------------------------------------------- pinned edge cases

describe("round-trip edge cases", () => {
  it("extreme integers, ±inf, -0 and subnormal floats round-trip", () => {
    const config = create(ModelConfigSchema, {
      maxBatchSize: -(2 ** 31),
      input: [{ dims: [-1n, int64Min, int64Max], dataType: 1234 as DataType }],
      schedulingChoice: {
        case: "sequenceBatching",
        value: {
          strategyChoice: {
            case: "direct",
            value: { maxQueueDelayMicroseconds: uint64Max, minimumSlotUtilization: -0 },
          },
          controlInput: [
            {
              control: [
                { fp32FalseTrue: [Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY, Math.fround(1e-45), -0] },
              ],
            },
          ],
        },
      },
    });
    const printed = printModelConfig(config);
    expect(printed).toContain("minimum_slot_utilization: -0");
    expect(printed).toContain("fp32_false_true: -inf");
    expect(printed).toContain(`max_queue_delay_microseconds: ${uint64Max}`);
    expect(equals(ModelConfigSchema, parseModelConfig(printed), config)).toBe(true);
  });

  it("NaN prints as `nan` and parses back as NaN, but never equals() itself", () => {
    const config = create(ModelConfigSchema, {
      schedulingChoice: {
        case: "sequenceBatching",
        value: {
          strategyChoice: { case: "direct", value: { minimumSlotUtilization: Number.NaN } },
          controlInput: [{ control: [{ fp32FalseTrue: [Number.NaN, 1] }] }],
        },
      },
      modelMetrics: {
        metricControl: [{ metricOptions: { case: "histogramOptions", value: { buckets: [Number.NaN] } } }],
      },
    });
    const printed = printModelConfig(config);
    expect(printed.match(/: nan$/gm)).toHaveLength(3);
    const parsed = parseModelConfig(printed);
    const batching = parsed.schedulingChoice.case === "sequenceBatching" ? parsed.schedulingChoice.value : undefined;
    const direct = batching?.strategyChoice.case === "direct" ? batching.strategyChoice.value : undefined;
    expect(direct?.minimumSlotUtilization).toBeNaN();
    expect(batching?.controlInput[0]?.control[0]?.fp32FalseTrue).toEqual([Number.NaN, 1]);
    expect(equals(ModelConfigSchema, parsed, config)).toBe(false); // IEEE semantics, as documented
    expect(printModelConfig(parsed)).toBe(printed);
  });

  it("an unpaired surrogate in a string reads back as U+FFFD (documented limitation)", () => {
    const printed = printModelConfig(create(ModelConfigSchema, { name: "a\ud800b" }));
    expect(parseModelConfig(printed).name).toBe("a\ufffdb");
  });

  // Undocumented upstream bug (see the header comment): expected to fail until it is fixed.
  it("a string value starting with U+FEFF keeps it", () => {
    const config = create(ModelConfigSchema, { name: "\ufeffsimple", metricTags: { "\ufeff": "\ufeffx" } });
    const parsed = roundTrip(config);
    expect(parsed.name).toBe("\ufeffsimple");
    expect(parsed.metricTags).toEqual({ "\ufeff": "\ufeffx" });
  });

  // bufbuild/protobuf-es#1451: the reader assigns map entries into a plain object, so the key
  // "__proto__" sets the map's prototype instead of adding an entry. Marked `fails` so the test
  // suite stays green while the upstream behaviour lasts and flags the day it is fixed.
  it.fails('a map entry keyed "__proto__" survives the round trip (upstream bug, see comment)', () => {
    const config = create(ModelConfigSchema, { metricTags: { ["__proto__"]: "x", team: "ml" } });
    expect(Object.keys(config.metricTags)).toEqual(["__proto__", "team"]);
    const parsed = roundTrip(config);
    expect(Object.keys(parsed.metricTags)).toEqual(["__proto__", "team"]);
  });
});
