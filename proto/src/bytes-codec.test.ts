import { describe, expect, it } from "vitest";
import { BytesCodecError, countBytesElements, decodeBytesElements, encodeBytesElements } from "./bytes-codec.js";

const bytes = (...values: number[]) => new Uint8Array(values);

/** A seeded generator (mulberry32), so that every run checks the same many cases. */
function random(seed: number): (below: number) => number {
  let state = seed;
  return (below) => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return (((t ^ (t >>> 14)) >>> 0) / 2 ** 32) * below;
  };
}

const randomBytes = (next: (below: number) => number, max: number) =>
  Uint8Array.from({ length: Math.floor(next(max + 1)) }, () => Math.floor(next(256)));

describe("BYTES codec (4-byte little-endian length before each element)", () => {
  it("encodes strings as UTF-8 and byte arrays as they are", () => {
    expect([...encodeBytesElements(["é", bytes(7), ""])]).toEqual([2, 0, 0, 0, 0xc3, 0xa9, 1, 0, 0, 0, 7, 0, 0, 0, 0]);
    expect(encodeBytesElements([])).toEqual(new Uint8Array(0));
  });

  it("reads little-endian lengths and returns views, not copies", () => {
    const data = new Uint8Array(300 + 4);
    data.set([44, 1, 0, 0]);
    const [element] = decodeBytesElements(data);
    expect(element?.byteLength).toBe(300);
    expect(element?.buffer).toBe(data.buffer);
  });

  it("round-trips any elements, also from an offset into a larger buffer", () => {
    const next = random(1);
    for (let run = 0; run < 500; run++) {
      const elements = Array.from({ length: Math.floor(next(10)) }, () => randomBytes(next, 20));
      const pad = Math.floor(next(8));
      const encoded = encodeBytesElements(elements);
      const shifted = new Uint8Array(pad + encoded.byteLength + 3).subarray(pad, pad + encoded.byteLength);
      shifted.set(encoded);
      expect(decodeBytesElements(shifted)).toEqual(elements);
      expect(countBytesElements(shifted)).toBe(elements.length);
    }
  });

  it("rejects a length prefix cut short", () => {
    const data = bytes(1, 0, 0, 0, 9, 2, 0);
    expect(() => decodeBytesElements(data)).toThrow(
      new BytesCodecError("malformed BYTES tensor: a length prefix is cut short", 1, 5),
    );
    expect(countBytesElements(data)).toBe(-1);
    expect(countBytesElements(bytes(0))).toBe(-1);
  });

  it("rejects a length past the end of the data", () => {
    const data = bytes(0, 0, 0, 0, 3, 0, 0, 0, 1, 2);
    let error: unknown;
    try {
      decodeBytesElements(data);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(BytesCodecError);
    expect(error).toBeInstanceOf(RangeError);
    expect(error).toMatchObject({
      message: "malformed BYTES tensor: an element overruns the data",
      element: 1,
      offset: 4,
    });
    expect(countBytesElements(data)).toBe(-1);
    expect(countBytesElements(bytes(0xff, 0xff, 0xff, 0xff))).toBe(-1);
  });

  it("on cut or altered data, throws only BytesCodecError, and agrees with the counter", () => {
    const next = random(2);
    let valid = 0;
    for (let run = 0; run < 2000; run++) {
      const elements = Array.from({ length: Math.floor(next(5)) }, () => randomBytes(next, 6));
      const data = encodeBytesElements(elements);
      if (data.byteLength > 0 && next(2) < 1) data[Math.floor(next(data.byteLength))] = Math.floor(next(12));
      const cut = data.subarray(0, next(3) < 1 ? Math.floor(next(data.byteLength + 1)) : data.byteLength);
      const count = countBytesElements(cut);
      if (count < 0) expect(() => decodeBytesElements(cut)).toThrow(BytesCodecError);
      else expect(decodeBytesElements(cut)).toHaveLength(count);
      if (count >= 0) valid++;
    }
    expect(valid).toBeGreaterThan(200);
    expect(valid).toBeLessThan(1800);
  });
});
