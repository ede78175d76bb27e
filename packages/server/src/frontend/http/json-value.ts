/** Parsed JSON values (see `parseJson` in json-parse.ts) and the parse error. */
/** A number written with a fraction or an exponent, or an integer too large for 64 bits. */
export class JsonFloat {
  constructor(readonly value: number) {}
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
