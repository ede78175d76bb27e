import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { equals } from "@bufbuild/protobuf";
import { DataType, ModelConfigSchema, ModelInstanceGroup_Kind } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { ConfigParseError, parseModelConfig, printModelConfig } from "./text-format.js";

const corpus = fileURLToPath(new URL("../test/corpus/model-configs/", import.meta.url));
const files = readdirSync(corpus).filter((f) => f.endsWith(".pbtxt"));

describe("config.pbtxt corpus (168 real Triton configs)", () => {
  it("holds the whole corpus", () => {
    expect(files).toHaveLength(168);
  });

  it.each(files)("%s parses, round-trips and prints stably", (file) => {
    const config = parseModelConfig(readFileSync(corpus + file, "utf8"));
    const printed = printModelConfig(config);
    const reparsed = parseModelConfig(printed);
    expect(equals(ModelConfigSchema, reparsed, config)).toBe(true);
    expect(printModelConfig(reparsed)).toBe(printed);
  });
});

describe("parseModelConfig", () => {
  it("reads Triton's `simple` example field by field", () => {
    const config = parseModelConfig(
      readFileSync(`${corpus}server--docs--examples--model_repository--simple.pbtxt`, "utf8"),
    );
    expect(config.name).toBe("simple");
    expect(config.platform).toBe("onnxruntime_onnx");
    expect(config.maxBatchSize).toBe(8);
    expect(config.input.map((i) => [i.name, i.dataType, i.dims])).toEqual([
      ["INPUT0", DataType.TYPE_INT32, [16n]],
      ["INPUT1", DataType.TYPE_INT32, [16n]],
    ]);
    expect(config.output.map((o) => o.name)).toEqual(["OUTPUT0", "OUTPUT1"]);
  });

  it("accepts both list and repeated-block forms, comments and optional colons", () => {
    const a = parseModelConfig("instance_group [ { kind: KIND_CPU count: 2 }, { kind: KIND_GPU } ] # two groups");
    const b = parseModelConfig("instance_group { kind: KIND_CPU, count: 2 }\ninstance_group: { kind: KIND_GPU }");
    expect(equals(ModelConfigSchema, a, b)).toBe(true);
    expect(a.instanceGroup.map((g) => g.kind)).toEqual([ModelInstanceGroup_Kind.CPU, ModelInstanceGroup_Kind.GPU]);
  });

  it.each([
    ['name: "x"\nmax_batch_sise: 8', 2, 1, /unknown field "max_batch_sise"/],
    ['name: "x"\ninput [ { name: "a" data_type: TYPE_FOO } ]', 2, 32, /unknown enum value "TYPE_FOO"/],
    ['name: "x"\n  input [ { name: "a" dims: [ 1, 2 } ]', 2, 36, /expected "," or "]" in list, got "}"/],
    ['max_batch_size: "abc"', 1, 17, /expected an integer/],
    ['name: "x"\ninput {\n  name: "y"\n', 3, 12, /unexpected end of input/],
    ['name: "x\n', 1, 8, /in string/],
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a config template placeholder, on purpose
    ['platform: "p"\nname: ${model_name}\n', 2, 7, /unexpected "\$"/],
  ] as const)("positions errors at line and column: %j", (text, line, column, reason) => {
    const error = (() => {
      try {
        parseModelConfig(text, "models/x/config.pbtxt");
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(ConfigParseError);
    expect(error).toMatchObject({ line, column, file: "models/x/config.pbtxt" });
    expect((error as ConfigParseError).reason).toMatch(reason);
    expect((error as Error).message).toMatch(new RegExp(`^models/x/config.pbtxt:${line}:${column}: `));
  });

  it("rejects unknown fields and enum values, as Triton does", () => {
    expect(() => parseModelConfig("max_batch_sise: 8")).toThrow(/unknown field "max_batch_sise"/);
    expect(() => parseModelConfig('input { name: "x" data_type: TYPE_FOO }')).toThrow(/TYPE_FOO/);
  });
});
