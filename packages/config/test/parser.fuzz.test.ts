import { readdirSync, readFileSync } from "node:fs";
import vm from "node:vm";
import { type DescEnum, type DescField, type DescMessage, ScalarType } from "@bufbuild/protobuf";
import { fromText } from "@bufbuild/protobuf/txtpb";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { type ModelConfig, ModelConfigSchema } from "@galley/proto";
import fc from "fast-check";
import { afterAll, describe, expect, it } from "vitest";
import { ConfigParseError, parseModelConfig, printModelConfig } from "../src/text-format.js";

/*
 * Fuzzing parseModelConfig. Every input must either parse, or fail with a ConfigParseError
 * positioned inside the input; nothing else may be thrown, and no input may hang or be slow.
 *
 * - A hang cannot be caught by vitest's test timeout (the parser is synchronous), so each parse
 *   runs through node:vm with a timeout, which terminates a runaway call and fails the test.
 * - Each parse is timed and must take < 1 s (a pathological, super-linear case, not a slow machine:
 *   the bound leaves room for a loaded 2-core CI runner): on the error path parseModelConfig re-parses
 *   ~log2(length) prefixes of the input to locate the error.
 * - An accepted input must print, and its printout must read back to the same printout.
 */

const file = "fuzz.pbtxt";
const perInputMs = 1000;
const hangMs = 2_000;
const testTimeout = 30_000;

const corpusDir = new URL("./corpus/model-configs/", import.meta.url);
const corpus = readdirSync(corpusDir)
  .filter((name) => name.endsWith(".pbtxt"))
  .sort()
  .map((name) => readFileSync(new URL(name, corpusDir), "utf8"));

// ---------------------------------------------------------------- the oracle

type Tally = { inputs: number; rejected: number; accepted: number; slowestMs: number };
const newTally = (): Tally => ({ inputs: 0, rejected: 0, accepted: 0, slowestMs: 0 });
const total = newTally();

const sandbox = vm.createContext({ parse: parseModelConfig, text: "", file, result: undefined });
const guardedParse = new vm.Script("result = parse(text, file)");

/** parseModelConfig(text), terminated with an error if it runs longer than `hangMs`. */
function parseGuarded(text: string): ModelConfig {
  sandbox.text = text;
  sandbox.result = undefined;
  try {
    guardedParse.runInContext(sandbox, { timeout: hangMs });
  } catch (error) {
    if ((error as { code?: string }).code === "ERR_SCRIPT_EXECUTION_TIMEOUT") {
      throw new Error(`parseModelConfig hung (> ${hangMs} ms) on ${show(text)}`);
    }
    throw error;
  }
  return sandbox.result as ModelConfig;
}

const show = (text: string) => JSON.stringify(text.length > 400 ? `${text.slice(0, 400)}…` : text);

/** Parse one input and check the contract; counts it in `tally`. */
function check(text: string, tally: Tally): void {
  const start = performance.now();
  let parsed: ModelConfig | undefined;
  let failure: unknown;
  try {
    parsed = parseGuarded(text);
  } catch (error) {
    if (error instanceof Error && error.message.startsWith("parseModelConfig hung")) throw error;
    failure = error;
  }
  const elapsed = performance.now() - start;
  for (const t of [tally, total]) {
    t.inputs++;
    t.slowestMs = Math.max(t.slowestMs, elapsed);
    if (parsed) t.accepted++;
    else t.rejected++;
  }

  if (parsed) {
    const printed = printModelConfig(parsed);
    if (printModelConfig(parseModelConfig(printed)) !== printed) {
      throw new Error(`accepted input does not print stably: ${show(text)}`);
    }
  } else {
    if (!(failure instanceof ConfigParseError)) {
      throw new Error(`parseModelConfig threw ${String(failure)} (not a ConfigParseError) on ${show(text)}`, {
        cause: failure,
      });
    }
    const { line, column } = failure;
    const lines = text.split("\n");
    const inside =
      Number.isInteger(line) &&
      Number.isInteger(column) &&
      line >= 1 &&
      line <= lines.length + 1 &&
      column >= 1 &&
      // Stricter than asked: the column lies on the line, at most one past its last character.
      column <= (lines[line - 1]?.length ?? 0) + 1;
    if (!inside) {
      throw new Error(`error position ${line}:${column} outside the input (${lines.length} lines): ${show(text)}`);
    }
    // Stricter than asked: an unknown field or enum value is reported where its name starts.
    const named = /^unknown (?:field|enum value) "([^"]+)"/.exec(failure.reason)?.[1];
    if (named !== undefined) {
      const offset = lines.slice(0, line - 1).reduce((sum, l) => sum + l.length + 1, 0) + column - 1;
      if (!text.startsWith(named, offset)) {
        throw new Error(`"${named}" is not at the reported ${line}:${column}: ${show(text)}`);
      }
    }
    if (failure.file !== file || failure.message !== `${file}:${line}:${column}: ${failure.reason}`) {
      throw new Error(`badly formed ConfigParseError ${JSON.stringify(failure.message)}`);
    }
  }
  if (elapsed >= perInputMs) {
    throw new Error(`parseModelConfig took ${elapsed.toFixed(0)} ms (>= ${perInputMs}) on ${show(text)}`);
  }
}

/** Run `check` over `numRuns` inputs of `inputs`, and log the counts. */
function fuzz(label: string, inputs: fc.Arbitrary<string>, numRuns: number): void {
  const tally = newTally();
  fc.assert(
    fc.property(inputs, (text) => check(text, tally)),
    { numRuns },
  );
  console.log(
    `fuzz ${label}: ${tally.inputs} inputs, ${tally.rejected} rejected, ${tally.accepted} accepted, ` +
      `slowest ${tally.slowestMs.toFixed(1)} ms`,
  );
  expect(tally.inputs).toBeGreaterThanOrEqual(numRuns);
}

// ---------------------------------------------------------------- vocabulary of the schema

function messageOf(field: DescField): DescMessage | undefined {
  if (field.fieldKind === "message") return field.message;
  if (field.fieldKind === "list" && field.listKind === "message") return field.message;
  if (field.fieldKind === "map" && field.mapKind === "message") return field.message;
  return undefined;
}

function enumOf(field: DescField): DescEnum | undefined {
  if (field.fieldKind === "enum") return field.enum;
  if (field.fieldKind === "list" && field.listKind === "enum") return field.enum;
  if (field.fieldKind === "map" && field.mapKind === "enum") return field.enum;
  return undefined;
}

const fieldNames = new Set<string>(["key", "value"]);
const enumNames = new Set<string>();
(function collect(desc: DescMessage, seen: Set<DescMessage>) {
  if (seen.has(desc)) return;
  seen.add(desc);
  for (const field of desc.fields) {
    fieldNames.add(field.name);
    for (const value of enumOf(field)?.values ?? []) enumNames.add(value.name);
    const message = messageOf(field);
    if (message) collect(message, seen);
  }
})(ModelConfigSchema, new Set());

// ---------------------------------------------------------------- token-level arbitraries

const numberLiteral = fc.oneof(
  fc.integer().map(String),
  fc.bigInt({ min: -(2n ** 66n), max: 2n ** 66n }).map(String),
  fc.double().map(String), // includes "NaN", "Infinity", "1e+300", "-0"
  fc.constantFrom(
    ...["0", "-0", "007", "08", "0x1F", "0X", "0xZ", "1e5", "1e", "1e+", ".5", "5.", "1.5f", "2F", "1.2.3", "5bar"],
    ...["inf", "-inf", "infinity", "-Infinity", "nan", "-nan", "NaN", "18446744073709551616", "-9223372036854775809"],
    ...["2147483648", "-2147483649", "4294967296", "1_000", "0b1", "+1", "- 42", "-\n7"],
  ),
);

const escapeSequence = fc.constantFrom(
  ...["\\n", "\\t", "\\\\", '\\"', "\\'", "\\?", "\\a", "\\x41", "\\x4", "\\x", "\\xZZ", "\\101", "\\777", "\\400"],
  ...["\\u00e9", "\\u12", "\\ud800", "\\udc00", "\\U0001F600", "\\U00110000", "\\q", "\\", "\\xef\\xbb\\xbf", "\\xff"],
);
const stringBody = fc
  .array(fc.oneof(fc.string({ maxLength: 6 }), fc.string({ unit: "binary", maxLength: 3 }), escapeSequence), {
    maxLength: 6,
  })
  .map((parts) => parts.join(""));
const stringLiteral = fc.oneof(
  stringBody.map((body) => `"${body.replaceAll('"', "")}"`),
  stringBody.map((body) => `'${body.replaceAll("'", "")}'`),
  stringBody.map((body) => `"${body}`), // unterminated, or closed early by a quote in the body
  fc.constantFrom('"a" "b"', "\"a\" 'b'", '"\n"', '"\0"', '""'),
);

const comment = fc.string({ unit: "binary", maxLength: 20 }).map((body) => `#${body}\n`);
const punctuation = fc.constantFrom("{", "}", "[", "]", ":", ",", ";", "<", ">", "-", "/", ".", "+", "{}", "[]", ": {");
const typeName = fc.constantFrom("[inference.ModelConfig]", "[type.googleapis.com/x.Y]", "[a%2Fb/c]", "[/x]", "[a..b]");
const identifier = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...fieldNames) },
  { weight: 2, arbitrary: fc.constantFrom(...enumNames) },
  { weight: 1, arbitrary: fc.constantFrom("true", "false", "True", "t", "f", "__proto__", "constructor", "_", "x-y") },
  { weight: 1, arbitrary: fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_]{0,8}$/) },
);
const token: fc.Arbitrary<string> = fc.oneof(
  { weight: 5, arbitrary: identifier },
  { weight: 4, arbitrary: punctuation },
  { weight: 2, arbitrary: numberLiteral },
  { weight: 2, arbitrary: stringLiteral },
  { weight: 1, arbitrary: comment },
  { weight: 1, arbitrary: typeName },
);
const separator = fc.constantFrom(" ", " ", " ", "\n", "\t", "\r\n", "", "\v", "\f", "\u00a0", "\ufeff", "\r");
const tokenSoup = fc
  .array(fc.tuple(token, separator), { maxLength: 60 })
  .map((pairs) => pairs.map(([t, s]) => t + s).join(""));

// ---------------------------------------------------------------- schema-directed text

/** A scalar literal for `type`: mostly in range, sometimes out of range or of another type. */
function scalarText(g: fc.GeneratorValue, type: ScalarType): string {
  if (g(fc.nat, { max: 19 }) === 0) return g(() => token);
  switch (type) {
    case ScalarType.STRING:
    case ScalarType.BYTES:
      return g(() => stringLiteral);
    case ScalarType.BOOL:
      return g(fc.constantFrom, "true", "false", "True", "False", "t", "f", "0", "1", "2");
    case ScalarType.FLOAT:
    case ScalarType.DOUBLE:
      return g(() => fc.oneof(fc.float({ noNaN: true }).map(String), numberLiteral)).replace("Infinity", "inf");
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return String(g(fc.bigInt, { min: -(2n ** 63n) - 1n, max: 2n ** 63n }));
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return String(g(fc.bigInt, { min: -1n, max: 2n ** 64n }));
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return String(g(fc.integer, { min: -1, max: 2 ** 32 }));
    default:
      return String(g(fc.integer, { min: -(2 ** 31) - 1, max: 2 ** 31 }));
  }
}

function enumText(g: fc.GeneratorValue, desc: DescEnum): string {
  return g(() =>
    fc.oneof(
      { weight: 8, arbitrary: fc.constantFrom(...desc.values.map((v) => v.name)) },
      { weight: 1, arbitrary: fc.integer({ min: -3, max: 20 }).map(String) },
      { weight: 1, arbitrary: fc.constantFrom(...enumNames) },
    ),
  );
}

/** The body of a `desc` message in text format, built field by field from the schema. */
function messageText(g: fc.GeneratorValue, desc: DescMessage, depth: number): string {
  // Indices, not the descriptors: fast-check compares `g` arguments deeply, and descriptors are cyclic.
  const picked = g(fc.subarray, [...desc.fields.keys()], {
    maxLength: Math.min(desc.fields.length, depth === 0 ? 6 : 3),
  });
  const fields = picked.flatMap((i) => desc.fields[i] ?? []);
  const ws = () => g(fc.constantFrom, " ", "\n", "\n  ", " # note\n");
  const block = (body: string) => (g(fc.boolean) ? `<${ws()}${body}${ws()}>` : `{${ws()}${body}${ws()}}`);
  const nested = (message: DescMessage) => (depth >= 5 ? "" : messageText(g, message, depth + 1));
  const out: string[] = [];
  for (const field of fields) {
    const name = g(fc.nat, { max: 29 }) === 0 ? g(fc.constantFrom, ...fieldNames) : field.name;
    const repeat = field.fieldKind === "list" || field.fieldKind === "map" ? g(fc.integer, { min: 1, max: 3 }) : 1;
    const values: string[] = [];
    for (let i = 0; i < repeat; i++) {
      switch (field.fieldKind) {
        case "scalar":
          values.push(scalarText(g, field.scalar));
          break;
        case "enum":
          values.push(enumText(g, field.enum));
          break;
        case "message":
          values.push(block(nested(field.message)));
          break;
        case "list":
          values.push(
            field.listKind === "message"
              ? block(nested(field.message))
              : field.listKind === "enum"
                ? enumText(g, field.enum)
                : scalarText(g, field.scalar),
          );
          break;
        case "map": {
          const value =
            field.mapKind === "message"
              ? `value ${block(nested(field.message))}`
              : `value: ${field.mapKind === "enum" ? enumText(g, field.enum) : scalarText(g, field.scalar)}`;
          values.push(block(`key: ${scalarText(g, field.mapKey)}${ws()}${value}`));
          break;
        }
      }
    }
    const isMessageLike = field.fieldKind === "message" || field.fieldKind === "map" || messageOf(field) !== undefined;
    const colon = isMessageLike ? g(fc.constantFrom, "", ": ", " ") : ": ";
    if (repeat > 1 && g(fc.boolean)) out.push(`${name}${isMessageLike ? " " : ": "}[${values.join(`,${ws()}`)}]`);
    else for (const value of values) out.push(`${name}${colon}${value}`);
  }
  return out.join(g(fc.constantFrom, "\n", " ", ", ", "; ", "\n\n"));
}

const schemaText = fc.gen().map((g) => messageText(g, ModelConfigSchema, 0));

// ---------------------------------------------------------------- mutations

type Mutation =
  | { op: "delete"; at: number; length: number }
  | { op: "insert"; at: number; text: string }
  | { op: "replace"; at: number; length: number; text: string }
  | { op: "duplicate"; at: number; length: number; to: number }
  | { op: "truncate"; at: number }
  | { op: "swapTokens"; a: number; b: number }
  | { op: "lines"; kind: "delete" | "duplicate" | "swap"; a: number; b: number }
  | { op: "graft"; from: string; start: number; length: number; at: number };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ op: fc.constant("delete" as const), at: fc.nat(), length: fc.integer({ min: 1, max: 64 }) }),
  fc.record({ op: fc.constant("insert" as const), at: fc.nat(), text: fc.oneof(token, fc.string({ maxLength: 4 })) }),
  fc.record({
    op: fc.constant("replace" as const),
    at: fc.nat(),
    length: fc.integer({ min: 1, max: 16 }),
    text: fc.oneof(token, fc.string({ unit: "binary", maxLength: 2 })),
  }),
  fc.record({
    op: fc.constant("duplicate" as const),
    at: fc.nat(),
    length: fc.integer({ min: 1, max: 256 }),
    to: fc.nat(),
  }),
  fc.record({ op: fc.constant("truncate" as const), at: fc.nat() }),
  fc.record({ op: fc.constant("swapTokens" as const), a: fc.nat(), b: fc.nat() }),
  fc.record({
    op: fc.constant("lines" as const),
    kind: fc.constantFrom("delete" as const, "duplicate" as const, "swap" as const),
    a: fc.nat(),
    b: fc.nat(),
  }),
  fc.record({
    op: fc.constant("graft" as const),
    from: fc.constantFrom(...corpus),
    start: fc.nat(),
    length: fc.integer({ min: 1, max: 200 }),
    at: fc.nat(),
  }),
);

const tokenPattern = /"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|#[^\n]*|[A-Za-z_][\w.]*|-?[\d.][\w.+-]*|[^\s]/g;

function mutate(text: string, m: Mutation): string {
  const at = (n: number) => n % (text.length + 1);
  switch (m.op) {
    case "delete":
      return text.slice(0, at(m.at)) + text.slice(at(m.at) + m.length);
    case "insert":
      return text.slice(0, at(m.at)) + m.text + text.slice(at(m.at));
    case "replace":
      return text.slice(0, at(m.at)) + m.text + text.slice(at(m.at) + m.length);
    case "duplicate": {
      const slice = text.slice(at(m.at), at(m.at) + m.length);
      return text.slice(0, at(m.to)) + slice + text.slice(at(m.to));
    }
    case "truncate":
      return text.slice(0, at(m.at));
    case "swapTokens": {
      const tokens = [...text.matchAll(tokenPattern)];
      if (tokens.length < 2) return text;
      const [i, j] = [m.a % tokens.length, m.b % tokens.length].sort((x, y) => x - y) as [number, number];
      const first = tokens[i];
      const second = tokens[j];
      if (!first || !second || i === j) return text;
      const firstEnd = first.index + first[0].length;
      return (
        text.slice(0, first.index) +
        second[0] +
        text.slice(firstEnd, second.index) +
        first[0] +
        text.slice(second.index + second[0].length)
      );
    }
    case "lines": {
      const lines = text.split("\n");
      const a = m.a % lines.length;
      const b = m.b % lines.length;
      if (m.kind === "delete") lines.splice(a, 1);
      else if (m.kind === "duplicate") lines.splice(b, 0, lines[a] ?? "");
      else [lines[a], lines[b]] = [lines[b] ?? "", lines[a] ?? ""];
      return lines.join("\n");
    }
    case "graft": {
      const start = m.start % (m.from.length + 1);
      return text.slice(0, at(m.at)) + m.from.slice(start, start + m.length) + text.slice(at(m.at));
    }
  }
}

const mutated = (base: fc.Arbitrary<string>, maxOps = 4) =>
  fc
    .tuple(base, fc.array(mutation, { minLength: 1, maxLength: maxOps }))
    .map(([text, ops]) => ops.reduce(mutate, text));

// ---------------------------------------------------------------- the fuzz runs

describe("parseModelConfig under fuzzing", () => {
  afterAll(() => {
    console.log(
      `fuzz: ${total.inputs} inputs, ${total.rejected} rejected, ${total.accepted} accepted, ` +
        `slowest parse ${total.slowestMs.toFixed(1)} ms`,
    );
  });

  it("the mutation corpus is the 168 real configs", () => {
    expect(corpus).toHaveLength(168);
  });

  it(
    "random strings: ASCII, Unicode, and raw UTF-16 with lone surrogates",
    () => {
      const utf16 = fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)) });
      fuzz(
        "random strings",
        fc.oneof(
          fc.string({ maxLength: 200 }),
          fc.string({ unit: "binary", maxLength: 100 }),
          fc.string({ unit: "grapheme", maxLength: 50 }),
          utf16,
        ),
        800,
      );
    },
    testTimeout,
  );

  it(
    "token soup: field and enum names, punctuation, numbers, strings, comments",
    () => {
      fuzz("token soup", tokenSoup, 1500);
    },
    testTimeout,
  );

  it(
    "schema-directed text, as generated and mutated",
    () => {
      fuzz("schema-directed", fc.oneof(schemaText, mutated(schemaText, 2)), 800);
    },
    testTimeout,
  );

  it(
    "mutated corpus files: delete, insert, replace, duplicate, truncate, swap, graft",
    () => {
      fuzz("corpus mutations", mutated(fc.constantFrom(...corpus)), 2000);
    },
    testTimeout,
  );
});

// ---------------------------------------------------------------- deep nesting

describe("deep nesting", () => {
  /** Parse `text`, expecting a ConfigParseError at `line`:`column` whose reason matches `reason`. */
  function rejects(text: string, reason: RegExp, line: number, column: number): void {
    const start = performance.now();
    let failure: unknown;
    try {
      parseGuarded(text);
    } catch (error) {
      failure = error;
    }
    const elapsed = performance.now() - start;
    expect(failure).toBeInstanceOf(ConfigParseError);
    const error = failure as ConfigParseError;
    expect(error.reason).toMatch(reason);
    expect([error.line, error.column]).toEqual([line, column]);
    expect(elapsed).toBeLessThan(perInputMs);
  }

  it("10,000 nested `optimization { cuda {` blocks fail at the first field the schema lacks", () => {
    const unit = "optimization { cuda { ";
    rejects(
      unit.repeat(10_000),
      /^unknown field "optimization" for message inference\.ModelOptimizationPolicy\.Cuda$/,
      1,
      23,
    );
    rejects(
      `${unit.repeat(10_000)}${"} ".repeat(20_000)}`,
      /^unknown field "optimization" for message inference\.ModelOptimizationPolicy\.Cuda$/,
      1,
      23,
    );
  });

  it("10,000 nested `input [ { reshape {` blocks fail the same way", () => {
    rejects(
      "input [ { reshape { ".repeat(10_000),
      /^unknown field "input" for message inference\.ModelTensorReshape$/,
      1,
      21,
    );
    rejects(
      "input [ {\nreshape {\n".repeat(10_000),
      /^unknown field "input" for message inference\.ModelTensorReshape$/,
      3,
      1,
    );
  });

  it("100,000 bare opening brackets are rejected at the first one", () => {
    rejects("{".repeat(100_000), /^expected a field name, got "\{"$/, 1, 1);
    rejects("<".repeat(100_000), /^expected a field name, got "<"$/, 1, 1);
    // "[" in a field-name position opens an extension name, which cannot contain the second "[".
    rejects("[".repeat(100_000), /^unexpected "\[" in \[\.\.\.\] name$/, 1, 2);
    rejects(`input ${"[".repeat(100_000)}`, /^expected "\{" or "<", got "\["$/, 1, 8);
    rejects(`parameters { value ${"{ ".repeat(100_000)}`, /^expected a field name, got "\{"$/, 1, 22);
  });

  it("the deepest nesting the schema allows, left open, is an end-of-input error", () => {
    const open = "optimization { cuda { graph_spec { graph_lower_bound { input { value { dim: 1";
    rejects(open, /^unexpected end of input, expected "}"$/, 1, open.length + 1);
  });

  it("the reader's recursion limit turns 10,000 levels into an error, not a stack overflow", () => {
    // ModelConfig is not recursive: its deepest path is 7 messages, so parseModelConfig rejects a
    // deep input at the first unknown field (above) long before the reader's limit of 100 levels.
    // The limit itself is checked on a recursive schema, google.protobuf.Value.
    expect(() => fromText(ValueSchema, "list_value { values { ".repeat(10_000))).toThrow(/^recursion limit of 100 /);
    expect(() => fromText(ValueSchema, 'struct_value { fields { key: "a" value { '.repeat(10_000))).toThrow(
      /^recursion limit of 100 /,
    );
  });
});

describe("error positions", () => {
  // A negative identifier glued to the previous value (`t-foo` reads as the bool `t`, then the
  // field name `-foo`) is located at its own first character, and a number's exponent sign does
  // not split the number.
  it("an unknown field glued to the previous value is located at its own first character", () => {
    const text = "instance_group { passive: t-foo }";
    let failure: unknown;
    try {
      parseModelConfig(text);
    } catch (error) {
      failure = error;
    }
    expect(failure).toBeInstanceOf(ConfigParseError);
    expect((failure as ConfigParseError).reason).toMatch(/^unknown field "-foo"/);
    expect((failure as ConfigParseError).column).toBe(text.indexOf("-foo") + 1);
  });

  it("a number with a negative exponent is located at its first digit", () => {
    const text = "max_batch_size: 1e-5";
    let failure: unknown;
    try {
      parseModelConfig(text);
    } catch (error) {
      failure = error;
    }
    expect((failure as ConfigParseError).column).toBe(text.indexOf("1e-5") + 1);
  });
});
