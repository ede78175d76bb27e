/**
 * A JSON parser that reads request bytes the way Triton's (rapidjson through TritonJson) does:
 * integer literals stay exact up to 64 bits and are told apart from decimal literals (an INT32
 * tensor rejects `1.0`), `NaN`/`Infinity` are accepted, and errors carry rapidjson's English
 * messages and byte offsets (`Invalid value. at 5`).
 */
// The values the parser makes, and its errors.

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
export type JsonValue = null | boolean | string | number | bigint | JsonFloat | JsonValue[] | JsonObject | JsonTooDeep;

/** A parse failure: rapidjson's message and the byte offset where it was found. */
export class JsonSyntaxError extends Error {
  constructor(
    readonly reason: string,
    readonly offset: number,
  ) {
    super(`${reason} at ${offset}`);
  }
}

/**
 * An object or array nested past {@link MAX_DEPTH}: checked as JSON (to any depth, without
 * recursion) but not kept. It is a value of no JSON type, so a reader expecting a boolean, a
 * string, ... gets its usual type error (Triton's `Invalid value for 'ready': expected a boolean`
 * for a 250,000-deep `ready`), and tensor data refuses it as nested too deep.
 */
export class JsonTooDeep {}

const TOO_DEEP = new JsonTooDeep();

// The parser.

/** How deeply objects and arrays are kept (Triton reads tensor data to a depth of 100); deeper ones are {@link JsonTooDeep}. */
export const MAX_DEPTH = 100;

const UINT64_MAX = (1n << 64n) - 1n;
const INT64_MIN = -(1n << 63n);
const utf8 = new TextDecoder("utf-8");
/** The one-character escapes, by the byte after the backslash. */
const ESCAPES: Record<number, string> = {
  34: '"',
  92: "\\",
  47: "/",
  98: "\b",
  102: "\f",
  110: "\n",
  114: "\r",
  116: "\t",
};

/** Parse `bytes` as one JSON document. @throws {@link JsonSyntaxError} */
export function parseJson(bytes: Uint8Array): JsonValue {
  return new Parser(bytes).document();
}

class Parser {
  #at = 0;
  #depth = 0;
  /** The input as a one-byte-per-character string, for cheap slices of ASCII runs. */
  readonly #text: string;
  constructor(readonly s: Uint8Array) {
    this.#text = Buffer.from(s.buffer, s.byteOffset, s.byteLength).toString("latin1");
  }

  document(): JsonValue {
    this.#space();
    if (this.#at >= this.s.length) throw new JsonSyntaxError("The document is empty.", this.#at);
    const value = this.#value();
    this.#space();
    if (this.#at < this.s.length) {
      throw new JsonSyntaxError("The document root must not be followed by other values.", this.#at);
    }
    return value;
  }

  #space(): void {
    const s = this.s;
    let at = this.#at;
    while (at < s.length) {
      const c = s[at] as number;
      if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
      at++;
    }
    this.#at = at;
  }

  #value(): JsonValue {
    switch (this.s[this.#at]) {
      case 0x7b:
        return this.#depth >= MAX_DEPTH ? this.#deep() : this.#object();
      case 0x5b:
        return this.#depth >= MAX_DEPTH ? this.#deep() : this.#array();
      case 0x22:
        return this.#string();
      case 0x6e:
        return this.#literal("null", null);
      case 0x74:
        return this.#literal("true", true);
      case 0x66:
        return this.#literal("false", false);
      default:
        return this.#number();
    }
  }

  #literal<T>(word: string, value: T): T {
    for (let i = 0; i < word.length; i++) {
      if (this.s[this.#at + i] !== word.charCodeAt(i)) throw new JsonSyntaxError("Invalid value.", this.#at);
    }
    this.#at += word.length;
    return value;
  }

  /** Open a container: past its bracket and any space; true when it closes at once. */
  #open(closer: number): boolean {
    this.#depth++;
    this.#at++;
    this.#space();
    if (this.s[this.#at] !== closer) return false;
    this.#at++;
    this.#depth--;
    return true;
  }

  /** After a member or element: a comma continues (true), `closer` ends the container (false). */
  #next(closer: number, message: string): boolean {
    this.#space();
    const c = this.s[this.#at++];
    if (c === 0x2c) {
      this.#space();
      return true;
    }
    if (c !== closer) throw new JsonSyntaxError(message, this.#at - 1);
    this.#depth--;
    return false;
  }

  /**
   * The object or array at the cursor, nested past {@link MAX_DEPTH}: read with a stack of the
   * brackets still open instead of recursion (a body may nest hundreds of thousands deep), with
   * the errors the recursive reader gives.
   */
  #deep(): JsonTooDeep {
    const s = this.s;
    const open: number[] = [];
    for (;;) {
      const c = s[this.#at];
      if (c === 0x7b || c === 0x5b) {
        const closer = c === 0x7b ? 0x7d : 0x5d;
        this.#at++;
        this.#space();
        if (s[this.#at] !== closer) {
          open.push(closer);
          if (closer === 0x7d) this.#memberName();
          continue;
        }
        this.#at++;
      } else {
        this.#value();
      }
      // After a value: close what ends here, or go on to the next element or member.
      for (;;) {
        const closer = open.at(-1);
        if (closer === undefined) return TOO_DEEP;
        const object = closer === 0x7d;
        this.#space();
        const d = s[this.#at++];
        if (d === 0x2c) {
          this.#space();
          if (object) this.#memberName();
          break;
        }
        if (d !== closer) {
          const message = object
            ? "Missing a comma or '}' after an object member."
            : "Missing a comma or ']' after an array element.";
          throw new JsonSyntaxError(message, this.#at - 1);
        }
        open.pop();
      }
    }
  }

  /** An object member's name and colon, up to its value. */
  #memberName(): void {
    if (this.s[this.#at] !== 0x22) throw new JsonSyntaxError("Missing a name for object member.", this.#at);
    this.#string();
    this.#space();
    if (this.s[this.#at] !== 0x3a) {
      throw new JsonSyntaxError("Missing a colon after a name of object member.", this.#at);
    }
    this.#at++;
    this.#space();
  }

  #object(): JsonObject {
    const object: JsonObject = new Map();
    if (this.#open(0x7d)) return object;
    do {
      if (this.s[this.#at] !== 0x22) throw new JsonSyntaxError("Missing a name for object member.", this.#at);
      const key = this.#string();
      this.#space();
      if (this.s[this.#at] !== 0x3a) {
        throw new JsonSyntaxError("Missing a colon after a name of object member.", this.#at);
      }
      this.#at++;
      this.#space();
      const value = this.#value();
      if (!object.has(key)) object.set(key, value);
    } while (this.#next(0x7d, "Missing a comma or '}' after an object member."));
    return object;
  }

  #array(): JsonValue[] {
    const open = this.#at;
    const array: JsonValue[] = [];
    if (this.#open(0x5d)) return array;
    const decimals = this.#decimalArray(open);
    if (decimals) return decimals;
    do array.push(this.#value());
    while (this.#next(0x5d, "Missing a comma or ']' after an array element."));
    return array;
  }

  /**
   * Fast path for tensor data: an array (opened at `open`) of decimal literals only (a fraction
   * or an exponent each, no NaN/Infinity) converted by the engine's JSON.parse in one call, without
   * a JsonFloat per element. Anything else (an integer literal, another type, a syntax error, a
   * value too big for a double) returns undefined with the position unchanged, and the general
   * path reads the array (and reports any error).
   *
   * When the first element is a decimal literal, the text up to the next `]` is given to JSON.parse
   * first: if it is an array of finite numbers none of which is a whole number, every literal had a
   * fraction or an exponent (an integer literal's value is always whole) and nothing in it can hold a
   * `]`, so it is the whole array. That skips checking every byte here first: a body of 1,024 floats
   * parses in ~41 µs instead of ~55, one of 65,536 in ~2.6 ms instead of ~3.5 (JSON.parse of the
   * whole body: 31 µs and 2.2 ms; Node 26). Otherwise the bytes are checked one by one as before;
   * `json-decimal-array.test.ts` holds both to the general reader, literal by literal.
   */
  #decimalArray(open: number): number[] | undefined {
    const first = this.#at;
    if (this.#decimalEnd(first) < 0) return undefined;
    const close = this.#text.indexOf("]", first);
    if (close >= 0) {
      let values: unknown;
      try {
        values = JSON.parse(this.#text.slice(open, close + 1));
      } catch {
        values = undefined;
      }
      if (Array.isArray(values) && values.every(isFraction)) return this.#decimals(values, close + 1);
    }
    return this.#checkedDecimalArray(open);
  }

  /** The decimal array ending before `end`, as the fast path returns it. */
  #decimals(values: number[], end: number): number[] {
    this.#at = end;
    this.#depth--;
    return markDecimalArray(values);
  }

  /** {@link #decimalArray} checking every byte first, for an array whose values JSON.parse left in doubt. */
  #checkedDecimalArray(open: number): number[] | undefined {
    const s = this.s;
    let at = this.#at;
    for (;;) {
      at = this.#decimalEnd(at);
      if (at < 0) return undefined;
      while (isSpace(s[at])) at++;
      const c = s[at++];
      if (c === 0x5d) break;
      if (c !== 0x2c) return undefined;
      while (isSpace(s[at])) at++;
    }
    const values = JSON.parse(this.#text.slice(open, at)) as number[];
    for (const v of values) if (!Number.isFinite(v)) return undefined;
    return this.#decimals(values, at);
  }

  /** Where the decimal literal (one with a fraction or an exponent) at `start` ends, or -1 if there is none. */
  #decimalEnd(start: number): number {
    const s = this.s;
    let at = start;
    if (s[at] === 0x2d) at++;
    if (s[at] === 0x30) at++;
    else if (isDigit(s[at])) while (isDigit(s[at])) at++;
    else return -1;
    let decimal = false;
    if (s[at] === 0x2e) {
      at++;
      if (!isDigit(s[at])) return -1;
      while (isDigit(s[at])) at++;
      decimal = true;
    }
    if (s[at] === 0x65 || s[at] === 0x45) {
      at++;
      if (s[at] === 0x2b || s[at] === 0x2d) at++;
      if (!isDigit(s[at])) return -1;
      while (isDigit(s[at])) at++;
      decimal = true;
    }
    return decimal ? at : -1;
  }

  #string(): string {
    const s = this.s;
    const start = ++this.#at;
    let at = start;
    let ascii = true;
    // Fast path: no escapes.
    for (;;) {
      if (at >= s.length) throw new JsonSyntaxError("Missing a closing quotation mark in string.", at);
      const c = s[at] as number;
      if (c === 0x22) {
        this.#at = at + 1;
        return ascii ? this.#text.slice(start, at) : utf8.decode(s.subarray(start, at));
      }
      if (c === 0x5c) break;
      if (c < 0x20) this.#controlCharacter(c, at);
      if (c >= 0x80) ascii = false;
      at++;
    }
    // Slow path: decode piecewise around escapes.
    let out = utf8.decode(s.subarray(start, at));
    let run = at;
    for (;;) {
      if (at >= s.length) throw new JsonSyntaxError("Missing a closing quotation mark in string.", at);
      const c = s[at] as number;
      if (c === 0x22) {
        out += utf8.decode(s.subarray(run, at));
        this.#at = at + 1;
        return out;
      }
      if (c < 0x20) this.#controlCharacter(c, at);
      if (c !== 0x5c) {
        at++;
        continue;
      }
      out += utf8.decode(s.subarray(run, at));
      const escapeAt = at;
      const e = s[at + 1];
      at += 2;
      const simple = e === undefined ? undefined : ESCAPES[e];
      if (simple !== undefined) {
        out += simple;
      } else if (e === 0x75) {
        let code = this.#hex4(at);
        at += 4;
        if (code >= 0xd800 && code <= 0xdbff) {
          if (s[at] !== 0x5c || s[at + 1] !== 0x75) {
            throw new JsonSyntaxError("The surrogate pair in string is invalid.", at);
          }
          const low = this.#hex4(at + 2);
          if (low < 0xdc00 || low > 0xdfff) throw new JsonSyntaxError("The surrogate pair in string is invalid.", at);
          code = ((code - 0xd800) << 10) + (low - 0xdc00) + 0x10000;
          at += 6;
        }
        out += String.fromCodePoint(code);
      } else {
        throw new JsonSyntaxError("Invalid escape character in string.", escapeAt);
      }
      run = at;
    }
  }

  #controlCharacter(c: number, at: number): never {
    if (c === 0) throw new JsonSyntaxError("Missing a closing quotation mark in string.", at);
    throw new JsonSyntaxError("Invalid encoding in string.", at);
  }

  #hex4(at: number): number {
    let code = 0;
    for (let i = 0; i < 4; i++) {
      const c = this.s[at + i] ?? 0;
      const digit =
        c >= 0x30 && c <= 0x39 ? c - 0x30 : c >= 0x41 && c <= 0x46 ? c - 0x37 : c >= 0x61 && c <= 0x66 ? c - 0x57 : -1;
      if (digit < 0) throw new JsonSyntaxError("Incorrect hex digit after \\u escape in string.", at + i);
      code = code * 16 + digit;
    }
    return code;
  }

  #number(): number | bigint | JsonFloat {
    const s = this.s;
    const start = this.#at;
    let at = start;
    const minus = s[at] === 0x2d;
    if (minus) at++;
    if (s[at] === 0x4e || s[at] === 0x49) return this.#nanOrInfinity(start, at, minus);
    const digitsStart = at;
    let small = 0;
    if (s[at] === 0x30) {
      at++;
    } else if (isDigit(s[at])) {
      while (isDigit(s[at])) small = small * 10 + ((s[at++] as number) - 0x30);
    } else {
      throw new JsonSyntaxError("Invalid value.", at);
    }
    const digitsEnd = at;
    let float = false;
    if (s[at] === 0x2e) {
      at++;
      if (!isDigit(s[at])) throw new JsonSyntaxError("Miss fraction part in number.", at);
      while (isDigit(s[at])) at++;
      float = true;
    }
    if (s[at] === 0x65 || s[at] === 0x45) {
      at++;
      if (s[at] === 0x2b || s[at] === 0x2d) at++;
      if (!isDigit(s[at])) throw new JsonSyntaxError("Miss exponent in number.", at);
      while (isDigit(s[at])) at++;
      float = true;
    }
    this.#at = at;
    if (!float && digitsEnd - digitsStart <= 15) return minus && small !== 0 ? -small : small;
    const text = this.#text.slice(start, at);
    if (!float) {
      const big = BigInt(text);
      if (big >= INT64_MIN && big <= UINT64_MAX) {
        return big >= BigInt(Number.MIN_SAFE_INTEGER) && big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
      }
    }
    const value = Number(text);
    if (!Number.isFinite(value)) throw new JsonSyntaxError("Number too big to be stored in double.", start);
    return new JsonFloat(value);
  }

  #nanOrInfinity(start: number, at: number, minus: boolean): JsonFloat {
    const word = (w: string) => {
      for (let i = 0; i < w.length; i++) if (this.s[at + i] !== w.charCodeAt(i)) return false;
      return true;
    };
    if (!minus && word("NaN")) {
      this.#at = at + 3;
      return new JsonFloat(Number.NaN);
    }
    if (word("Infinity") || word("Inf")) {
      this.#at = at + (word("Infinity") ? 8 : 3);
      return new JsonFloat(minus ? -Infinity : Infinity);
    }
    throw new JsonSyntaxError("Invalid value.", start);
  }
}

function isSpace(c: number | undefined): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/** A finite number that is not whole: JSON.parse's value of a decimal literal, never of an integer one. */
function isFraction(v: unknown): boolean {
  return typeof v === "number" && Number.isFinite(v) && !Number.isInteger(v);
}

function isDigit(c: number | undefined): boolean {
  return c !== undefined && c >= 0x30 && c <= 0x39;
}
