/**
 * Compact JSON written the way Triton's rapidjson writer writes it: strings escape only `"`,
 * `\` and control characters (`\u001F` in upper case) and pass other bytes through unchanged;
 * doubles print as the shortest round-trip decimal with rapidjson's layout (`1.0`, `0.001`,
 * `1e-7`, `1.5e30`); 64-bit integers print exactly. Output is bytes, so BYTES tensor elements
 * that are not UTF-8 pass through as Triton passes them.
 */
export class JsonWriter {
  // From Node's Buffer pool: a fresh zero-filled 1 KiB ArrayBuffer per reply cost ~5 µs (its
  // backing store is malloc'ed and tracked), more than writing a small reply into it.
  #buffer: Uint8Array = Buffer.allocUnsafe(1024);
  #length = 0;

  /** The bytes written so far (a view; valid until the next write). */
  bytes(): Uint8Array {
    return this.#buffer.subarray(0, this.#length);
  }

  #reserve(extra: number): void {
    const need = this.#length + extra;
    if (need <= this.#buffer.length) return;
    let size = this.#buffer.length * 2;
    while (size < need) size *= 2;
    const grown = Buffer.allocUnsafe(size);
    grown.set(this.#buffer.subarray(0, this.#length));
    this.#buffer = grown;
  }

  /** Append ASCII text as it is (punctuation, numbers, keys known to need no escaping). */
  raw(text: string): this {
    this.#reserve(text.length);
    const b = this.#buffer;
    let at = this.#length;
    if (text.length > 32) {
      at += encoder.encodeInto(text, b.subarray(at)).written;
    } else {
      for (let i = 0; i < text.length; i++) b[at++] = text.charCodeAt(i);
    }
    this.#length = at;
    return this;
  }

  /** A JSON string from a JS string (UTF-8 encoded). */
  string(text: string): this {
    let plain = true;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c < 0x20 || c >= 0x7f || c === 0x22 || c === 0x5c) {
        plain = false;
        break;
      }
    }
    if (plain) return this.raw(`"${text}"`);
    return this.bytesString(encoder.encode(text));
  }

  /** A JSON string from raw bytes, escaped as rapidjson escapes (no UTF-8 validation). */
  bytesString(bytes: Uint8Array): this {
    this.#reserve(bytes.length * 6 + 2);
    const b = this.#buffer;
    let at = this.#length;
    b[at++] = 0x22;
    for (let i = 0; i < bytes.length; i++) {
      const c = bytes[i] as number;
      if (c >= 0x20 && c !== 0x22 && c !== 0x5c) {
        b[at++] = c;
        continue;
      }
      b[at++] = 0x5c;
      const short = SHORT_ESCAPES[c];
      if (short !== undefined) {
        b[at++] = short;
      } else {
        b[at++] = 0x75;
        b[at++] = 0x30;
        b[at++] = 0x30;
        b[at++] = HEX.charCodeAt(c >> 4);
        b[at++] = HEX.charCodeAt(c & 15);
      }
    }
    b[at++] = 0x22;
    this.#length = at;
    return this;
  }

  /** A double, as rapidjson's `Writer::Double` prints it. */
  double(value: number): this {
    return this.raw(formatDouble(value));
  }

  /**
   * Any JS value: objects in insertion order (undefined members skipped), arrays, strings,
   * booleans, null, bigints, and numbers (integers as integers, others as doubles).
   */
  value(value: unknown): this {
    switch (typeof value) {
      case "string":
        return this.string(value);
      case "boolean":
        return this.raw(value ? "true" : "false");
      case "bigint":
        return this.raw(value.toString());
      case "number":
        return Number.isInteger(value) && Math.abs(value) < 2 ** 63 ? this.raw(intString(value)) : this.double(value);
      case "object":
        break;
      default:
        return this.raw("null");
    }
    if (value === null) return this.raw("null");
    if (Array.isArray(value)) {
      this.raw("[");
      value.forEach((element, i) => {
        if (i > 0) this.raw(",");
        this.value(element);
      });
      return this.raw("]");
    }
    this.raw("{");
    let first = true;
    for (const [key, element] of Object.entries(value as Record<string, unknown>)) {
      if (element === undefined) continue;
      if (!first) this.raw(",");
      first = false;
      this.string(key).raw(":").value(element);
    }
    return this.raw("}");
  }
}

/** `value` as compact JSON bytes (see {@link JsonWriter}). */
export function jsonBytes(value: unknown): Uint8Array {
  return new JsonWriter().value(value).bytes();
}

const encoder = new TextEncoder();
const HEX = "0123456789ABCDEF";
const SHORT_ESCAPES: Record<number, number> = {
  8: 0x62,
  9: 0x74,
  10: 0x6e,
  12: 0x66,
  13: 0x72,
  34: 0x22,
  92: 0x5c,
};

function intString(value: number): string {
  return Number.isSafeInteger(value) ? String(value) : BigInt(value).toString();
}

/**
 * rapidjson's double layout over the shortest round-trip digits: `1.0`, `123.456`, `0.001234`,
 * `1e21`, `1.234e-7`; `NaN`/`Infinity` as written with `kWriteNanAndInfFlag`. JavaScript's own
 * number-to-string uses the same digits and the same switch to exponents (below 1e-6 and from
 * 1e21), so only integral values (`.0`) and the exponent sign (`e+`) need adjusting.
 */
export function formatDouble(value: number): string {
  // Most values (fractions between 1e-6 and 1e21) print as JavaScript prints them.
  const magnitude = Math.abs(value);
  if (magnitude >= 1e-6 && magnitude < 1e21 && !Number.isInteger(value)) return String(value);
  if (value === 0) return Object.is(value, -0) ? "-0.0" : "0.0";
  const text = String(value);
  const e = text.indexOf("e");
  if (e !== -1) return text.charCodeAt(e + 1) === 0x2b ? text.slice(0, e + 1) + text.slice(e + 2) : text;
  return text.indexOf(".") === -1 && Number.isFinite(value) ? `${text}.0` : text;
}

/**
 * The elements of a float array as {@link formatDouble} writes them, comma-separated. Runs of
 * values JavaScript already prints as rapidjson does (fractions below 1e21) go through the
 * typed array's own `join` in one native call each (each element printed as `String` prints it;
 * 1,024 floats in ~30 µs against ~52 for `JSON.stringify` of an `Array.from`); integral, huge and
 * non-finite values, which need `.0`, an exponent without `+` or `NaN`/`Infinity`, are formatted
 * one by one. When those are more than one in sixteen, every value is formatted one by one.
 */
export function formatDoubles(values: Float32Array | Float64Array): string {
  const n = values.length;
  const special: number[] = [];
  for (let i = 0; i < n; i++) {
    const v = values[i] as number;
    if (Number.isInteger(v) || !(Math.abs(v) < 1e21)) {
      special.push(i);
      if (special.length > n / 16) return Array.from(values, formatDouble).join(",");
    }
  }
  const pieces: string[] = [];
  const run = (from: number, to: number) => {
    if (to > from) pieces.push(values.subarray(from, to).join(","));
  };
  let from = 0;
  for (const i of special) {
    run(from, i);
    pieces.push(formatDouble(values[i] as number));
    from = i + 1;
  }
  run(from, n);
  return pieces.join(",");
}
