// The parser's decimal-array fast path against the general reader, literal by literal: for random
// arrays of number literals (decimals, integers, whole-valued decimals, exponents, -0.0, values too
// big for a double, NaN and Infinity tokens, malformed ones, strings and nested arrays, with any
// JSON whitespace), an array read as decimals must hold exactly the values each literal has when
// read alone, every literal must be a decimal one, and any other array must read as the general
// path reads its elements — or the whole parse must fail where the general path fails.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { isDecimalArray, JsonFloat, type JsonValue, parseJson } from "./json-parse.js";

const encoder = new TextEncoder();
const parse = (text: string) => parseJson(encoder.encode(text));
const outcome = (text: string): JsonValue | string => {
  try {
    return parse(text);
  } catch (error) {
    return `error: ${(error as Error).message}`;
  }
};

const decimal = fc
  .tuple(fc.double({ noNaN: true, noDefaultInfinity: true }), fc.constantFrom("", "e0", "E+2", "e-3"))
  .map(([v, e]) => {
    const text = String(v);
    return /[.eE]/.test(text) ? text : `${text}.0${e}`;
  });
const literal = fc.oneof(
  { weight: 10, arbitrary: decimal },
  { weight: 2, arbitrary: fc.integer().map(String) },
  {
    weight: 1,
    arbitrary: fc.constantFrom("1.0", "-0.0", "2e0", "1e400", "-1e-400", "0.5e", "01.5", "NaN", "Infinity", "-Inf"),
  },
  { weight: 1, arbitrary: fc.constantFrom('"a]"', "[1.5]", "[]", "true", "null", '{"a":1.5}') },
);
const space = fc.constantFrom("", " ", "\n", "\t ", "\r\n");

describe("the decimal-array fast path", () => {
  it("reads what the general reader reads, element by element", () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(space, literal, space), { minLength: 1, maxLength: 12 }), (parts) => {
        const text = `[${parts.map(([a, l, b]) => `${a}${l}${b}`).join(",")}]`;
        const whole = outcome(text);
        const alone = parts.map(([, l]) => outcome(l));
        if (typeof whole === "string") {
          // A failure of the whole is a failure of one of its elements, or of the array around them.
          expect(whole.startsWith("error: ")).toBe(true);
          return;
        }
        expect(Array.isArray(whole)).toBe(true);
        const array = whole as JsonValue[];
        if (isDecimalArray(array)) {
          alone.forEach((value, i) => {
            expect(value).toBeInstanceOf(JsonFloat);
            expect(Object.is(array[i], (value as JsonFloat).value)).toBe(true);
          });
        } else {
          expect(array).toEqual(alone);
        }
      }),
      { numRuns: 5000 },
    );
  });

  it("fails at the same offset as the general reader", () => {
    // With a leading integer the whole array goes through the general reader: the reference.
    for (const bad of ["0.5,01.5]", "0.5,]", "0.5 0.5]", "0.5,1e400]", "0.5,NaX]", "0.5", "0.5,[1.5"]) {
      const fast = outcome(`[${bad}`);
      const general = outcome(`[1,${bad}`);
      expect(typeof fast).toBe("string");
      // Offsets differ by the two bytes of "1,".
      const at = (e: JsonValue | string) => Number(/ at (\d+)$/.exec(String(e))?.[1]);
      expect(String(fast).replace(/ at \d+$/, "")).toBe(String(general).replace(/ at \d+$/, ""));
      expect(at(fast)).toBe(at(general) - 2);
    }
  });
});
