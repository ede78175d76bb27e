// The wire contract: every message, field, enum and RPC that PROTOCOL.md (§2, §3, §8) lists,
// checked against the generated descriptors. The tables are written from PROTOCOL.md, not from
// our .proto files, so a wrong name, number or type in proto/ fails here.
import {
  create,
  type DescEnum,
  type DescField,
  type DescMessage,
  fromBinary,
  ScalarType,
  toBinary,
} from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  file_grpc_health_v1_health,
  file_inference_grpc_service,
  file_inference_model_config,
  GRPCInferenceService,
  Health,
  ModelInferRequestSchema,
} from "../src/index.js";
import { enumTable, messageTable, oneofTable, rpcTable } from "./wire-table.js";

const files = [file_inference_grpc_service, file_inference_model_config, file_grpc_health_v1_health];

function allMessages(): Map<string, DescMessage> {
  const found = new Map<string, DescMessage>();
  const visit = (m: DescMessage) => {
    if (m.typeName.endsWith("Entry") && m.fields.length === 2 && m.fields[0]?.name === "key") {
      return; // synthetic map-entry message
    }
    found.set(m.typeName, m);
    for (const nested of m.nestedMessages) visit(nested);
  };
  for (const file of files) for (const m of file.messages) visit(m);
  return found;
}

function allEnums(): Map<string, DescEnum> {
  const found = new Map<string, DescEnum>();
  const visit = (m: DescMessage) => {
    for (const e of m.nestedEnums) found.set(e.typeName, e);
    for (const nested of m.nestedMessages) visit(nested);
  };
  for (const file of files) {
    for (const e of file.enums) found.set(e.typeName, e);
    for (const m of file.messages) visit(m);
  }
  return found;
}

function scalarName(t: ScalarType): string {
  return ScalarType[t].toLowerCase();
}

/** The field's type in .proto spelling: `string`, `repeated int64`, `map<string, inference.X>`. */
function describeType(field: DescField): string {
  switch (field.fieldKind) {
    case "scalar":
      return scalarName(field.scalar);
    case "enum":
      return field.enum.typeName;
    case "message":
      return field.message.typeName;
    case "list":
      switch (field.listKind) {
        case "scalar":
          return `repeated ${scalarName(field.scalar)}`;
        case "enum":
          return `repeated ${field.enum.typeName}`;
        case "message":
          return `repeated ${field.message.typeName}`;
      }
      break;
    case "map": {
      const value =
        field.mapKind === "scalar"
          ? scalarName(field.scalar)
          : field.mapKind === "enum"
            ? field.enum.typeName
            : field.message.typeName;
      return `map<${scalarName(field.mapKey)}, ${value}>`;
    }
  }
  throw new Error("unreachable");
}

const messages = allMessages();
const enums = allEnums();

describe("messages match PROTOCOL.md field by field", () => {
  it.each(Object.keys(messageTable))("%s", (typeName) => {
    const message = messages.get(typeName);
    expect(message, `${typeName} is missing`).toBeDefined();
    const actual = message?.fields.map((f) => `${f.name} = ${f.number} : ${describeType(f)}`).sort();
    expect(actual).toEqual([...(messageTable[typeName] ?? [])].sort());
  });

  it("the table covers every generated message", () => {
    const untested = [...messages.keys()].filter((name) => !(name in messageTable));
    expect(untested).toEqual([]);
  });
});

describe("oneofs match PROTOCOL.md", () => {
  it.each(Object.keys(oneofTable))("%s", (typeName) => {
    const message = messages.get(typeName);
    const actual = Object.fromEntries((message?.oneofs ?? []).map((o) => [o.name, o.fields.map((f) => f.name).sort()]));
    const expected = Object.fromEntries(Object.entries(oneofTable[typeName] ?? {}).map(([k, v]) => [k, [...v].sort()]));
    expect(actual).toEqual(expected);
  });

  it("every generated oneof is in the table", () => {
    const withOneofs = [...messages.values()].filter((m) => m.oneofs.length > 0).map((m) => m.typeName);
    expect(withOneofs.sort()).toEqual(Object.keys(oneofTable).sort());
  });
});

describe("enums match PROTOCOL.md value by value", () => {
  it.each(Object.keys(enumTable))("%s", (typeName) => {
    const e = enums.get(typeName);
    expect(e, `${typeName} is missing`).toBeDefined();
    expect(e?.values.map((v) => `${v.name} = ${v.number}`)).toEqual(enumTable[typeName]);
  });

  it("the table covers every generated enum", () => {
    expect([...enums.keys()].sort()).toEqual(Object.keys(enumTable).sort());
  });
});

describe("GRPCInferenceService", () => {
  it("is inference.GRPCInferenceService with exactly the 20 RPCs of PROTOCOL.md §2.1", () => {
    expect(GRPCInferenceService.typeName).toBe("inference.GRPCInferenceService");
    expect(GRPCInferenceService.methods.map((m) => m.name).sort()).toEqual(Object.keys(rpcTable).sort());
    expect(GRPCInferenceService.methods).toHaveLength(20);
  });

  it.each(Object.entries(rpcTable))("%s has path, kind and types of §2.1", (name, [kind, input, output]) => {
    const method = GRPCInferenceService.methods.find((m) => m.name === name);
    expect(method).toBeDefined();
    if (!method) return;
    expect(`/${method.parent.typeName}/${method.name}`).toBe(`/inference.GRPCInferenceService/${name}`);
    expect(method.methodKind).toBe(kind);
    expect(method.input.typeName).toBe(`inference.${input}`);
    expect(method.output.typeName).toBe(`inference.${output}`);
  });

  it("grpc.health.v1.Health has only Check (no Watch), as Triton serves it", () => {
    expect(Health.typeName).toBe("grpc.health.v1.Health");
    expect(Health.methods.map((m) => [m.name, m.methodKind, m.input.typeName, m.output.typeName])).toEqual([
      ["Check", "unary", "grpc.health.v1.HealthCheckRequest", "grpc.health.v1.HealthCheckResponse"],
    ]);
  });
});

describe("bytes on the wire", () => {
  it("encodes ModelInferRequest exactly as a protobuf peer expects", () => {
    const request = create(ModelInferRequestSchema, {
      modelName: "simple",
      inputs: [{ name: "INPUT0", datatype: "INT32", shape: [1n, 2n] }],
      rawInputContents: [new Uint8Array([1, 0, 0, 0, 2, 0, 0, 0])],
    });
    const bytes = toBinary(ModelInferRequestSchema, request);
    // model_name = 1 (tag 0x0a), inputs = 5 (tag 0x2a), raw_input_contents = 7 (tag 0x3a).
    // Inside the input: name = 1 (0x0a), datatype = 2 (0x12), shape = 3 packed (0x1a).
    // biome-ignore format: grouped by field, like a hex dump
    const expected = [
      0x0a, 6, ...Buffer.from("simple"),
      0x2a, 19, 0x0a, 6, ...Buffer.from("INPUT0"), 0x12, 5, ...Buffer.from("INT32"), 0x1a, 2, 1, 2,
      0x3a, 8, 1, 0, 0, 0, 2, 0, 0, 0,
    ];
    expect([...bytes]).toEqual(expected);
    expect(fromBinary(ModelInferRequestSchema, new Uint8Array(expected))).toEqual(request);
  });
});
