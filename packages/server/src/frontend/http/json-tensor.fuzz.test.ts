// Fuzzing the REST JSON reader and the JSON tensor decoder: any bytes parse to a value or fail with
// BAD_JSON (JSON_TOO_DEEP past 100 levels); any parsed `data` with any datatype and element count becomes tensor bytes of the right
// size or fails with an error from the table. Nothing else is thrown and nothing hangs.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decodeOrTableError, showBytes } from "../../../test/support/fuzz.js";
import { datatype } from "../../base/datatype.js";
import { InferenceError } from "../../base/errors.js";
import { parseBody } from "./json-access.js";
import { type JsonValue, parseJson } from "./json-parse.js";
import { tensorFromJson } from "./json-tensor.js";

const encoder = new TextEncoder();

/** JSON text as a client may write it: NaN and the infinities as bare tokens, as rapidjson's relaxed syntax reads them. */
function print(value: unknown): string {
  if (typeof value === "number") {
    if (Number.isNaN(value)) return "NaN";
    if (!Number.isFinite(value)) return value > 0 ? "Infinity" : "-Infinity";
    return Object.is(value, -0) ? "-0.0" : String(value);
  }
  if (typeof value === "bigint") return value.toString();
  if (Array.isArray(value)) return `[${value.map(print).join(",")}]`;
  if (value !== null && typeof value === "object") {
    return `{${Object.entries(value)
      .map(([k, v]) => `${JSON.stringify(k)}:${print(v)}`)
      .join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

const TOKENS = [
  "[",
  "]",
  "{",
  "}",
  ",",
  ":",
  '"',
  "\\",
  "NaN",
  "Infinity",
  "-Infinity",
  "Inf",
  "-Inf",
  "nan",
  "1e400",
  "-1e-400",
  "-0",
  "0.5",
  "1.",
  ".5",
  "01",
  "0x10",
  "18446744073709551616",
  "-9223372036854775809",
  "9007199254740993",
  "true",
  "false",
  "null",
  " ",
  "\t",
  '"\\u0000"',
  '"\\ud800"',
  '"\\uZZZZ"',
  "\u00e9",
  "\u0000",
];

/** Leaves a tensor may hold: every JSON kind, numbers of every sort. */
const leaf = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.float(),
  fc.bigInt({ min: -(1n << 64n), max: 1n << 64n }),
  fc.boolean(),
  fc.string({ maxLength: 8 }),
  fc.constant(null),
  fc.dictionary(fc.string({ maxLength: 3 }), fc.integer(), { maxKeys: 2 }),
);
const { data } = fc.letrec((tie) => ({
  data: fc.array(fc.oneof({ depthSize: "small" }, leaf, tie("data")), { maxLength: 12 }),
}));
/** Arrays of decimal literals only: the parser's fast path into FP32/FP64. */
const decimals = fc.array(
  fc.double({ noNaN: true, noDefaultInfinity: true }).map((d) => (Number.isInteger(d) ? d + 0.5 : d)),
  {
    maxLength: 40,
  },
);

const jsonText = fc.oneof(
  fc.json({ maxDepth: 4 }),
  data.map(print),
  fc.array(fc.constantFrom(...TOKENS), { maxLength: 30 }).map((t) => t.join("")),
  fc.string({ maxLength: 60 }),
  fc.integer({ min: 95, max: 400 }).map((n) => `${"[".repeat(n)}1${"]".repeat(n)}`),
  fc
    .tuple(fc.json({ maxDepth: 3 }), fc.nat(), fc.constantFrom(...TOKENS))
    .map(([text, at, token]) => text.slice(0, at % (text.length + 1)) + token + text.slice(at % (text.length + 1))),
);

const TYPES = [
  "BOOL",
  "UINT8",
  "UINT16",
  "UINT32",
  "UINT64",
  "INT8",
  "INT16",
  "INT32",
  "INT64",
  "FP16",
  "BF16",
  "FP32",
  "FP64",
  "BYTES",
  "INT128",
  "fp32",
  "",
];
function leaves(value: JsonValue): number {
  return Array.isArray(value) ? value.reduce((n: number, v) => n + leaves(v), 0) : 1;
}

const count = fc.oneof(fc.nat(48), fc.constantFrom(2 ** 31, 2 ** 53, 1e300, Number.POSITIVE_INFINITY));

describe("fuzzing the REST JSON reader", () => {
  it("parses any bytes to a value or fails with BAD_JSON or JSON_TOO_DEEP", () => {
    const bytes = fc.oneof(
      jsonText.map((t) => encoder.encode(t)),
      fc.uint8Array({ maxLength: 200 }),
    );
    fc.assert(
      fc.property(bytes, (input) => {
        const result = decodeOrTableError(
          () => parseBody(input),
          () => showBytes(input),
        );
        if (result instanceof InferenceError) expect(["BAD_JSON", "JSON_TOO_DEEP"]).toContain(result.id);
      }),
      { numRuns: 1500 },
    );
  });
});

describe("fuzzing the JSON tensor decoder", () => {
  it("turns any data into bytes of the right size or an error from the table", () => {
    const homogeneous = fc.oneof(
      fc.array(fc.integer(), { maxLength: 20 }),
      fc.array(fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }), { maxLength: 20 }),
      fc.array(fc.boolean(), { maxLength: 20 }),
      fc.array(fc.string({ maxLength: 5 }), { maxLength: 20 }),
      fc.array(fc.array(fc.integer({ min: -300, max: 300 }), { maxLength: 4 }), { maxLength: 5 }),
    );
    const arrays = fc.oneof(data.map(print), decimals.map(print), homogeneous.map(print), jsonText);
    let decoded = 0;
    fc.assert(
      fc.property(
        arrays,
        fc.constantFrom(...TYPES),
        fc.oneof({ weight: 3, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: count }),
        (text, type, given) => {
          let parsed: JsonValue;
          try {
            parsed = parseJson(encoder.encode(text));
          } catch {
            return;
          }
          if (!Array.isArray(parsed)) return;
          const values = parsed;
          // Mostly the element count the data holds, so that decoding gets past the count checks.
          const n = given ?? leaves(values);
          const result = decodeOrTableError(
            () => tensorFromJson("X", type, n, values),
            () => `${type} x${n}: ${text.slice(0, 300)}`,
          );
          if (result instanceof InferenceError) return;
          decoded++;
          const size = datatype(type)?.byteSize;
          if (type !== "BYTES" && size !== undefined) expect(result.byteLength).toBe(n * size);
        },
      ),
      { numRuns: 1500 },
    );
    // The generators reach the end of the decoder, not only its first checks.
    expect(decoded).toBeGreaterThan(50);
  });
});
