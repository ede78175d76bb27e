/** Parsed JSON values (see `parseJson` in json-parse.ts) and the parse error. */
/** A number written with a fraction or an exponent, or an integer too large for 64 bits. */
export class JsonFloat {
  constructor(readonly value: number) {}
}

const decimalArrays = new WeakSet<JsonValue[]>();

/**
 * Mark `array` as holding only decimal literals (numbers written with a fraction or an exponent,
 * all finite) as plain numbers: the parser's fast path for tensor data, which skips one
 * {@link JsonFloat} per element. Readers that care about literal kinds must check
 * {@link isDecimalArray}; `asArray` hands such an array out as JsonFloat elements.
 */
export function markDecimalArray(array: number[]): number[] {
  decimalArrays.add(array);
  return array;
}

/** Whether `value` is an array of decimal literals held as plain numbers (see {@link markDecimalArray}). */
export function isDecimalArray(value: JsonValue | undefined): value is number[] {
  return Array.isArray(value) && decimalArrays.has(value);
}

/** A JSON object; the first of duplicate keys wins, as rapidjson's member lookup does. */
export type JsonObject = Map<string, JsonValue>;

/**
 * A parsed JSON value. Integer literals are `number` when exactly representable and `bigint`
 * otherwise (always within int64/uint64); every other number is a {@link JsonFloat}.
 */
export type JsonValue = null | boolean | string | number | bigint | JsonFloat | JsonValue[] | JsonObject;

/** A parse failure: rapidjson's message and the byte offset where it was found. */
export class JsonSyntaxError extends Error {
  constructor(
    readonly reason: string,
    readonly offset: number,
  ) {
    super(`${reason} at ${offset}`);
  }
}

/** Objects and arrays nested deeper than the parser reads (rapidjson's handler stops it). */
export class JsonDepthError extends JsonSyntaxError {
  constructor(offset: number) {
    super("Terminate parsing due to Handler error.", offset);
  }
}
