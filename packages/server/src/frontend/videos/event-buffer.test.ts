import { describe, expect, it } from "vitest";
import { EventBuffer } from "./event-buffer.js";

const bytes = (n: number) => new Uint8Array(n);

describe("EventBuffer", () => {
  it("hands chunks over in order and ends after the last", async () => {
    const buffer = new EventBuffer(100, () => {
      throw new Error("no overflow expected");
    });
    const read = (async () => {
      const sizes: number[] = [];
      for await (const chunk of buffer) sizes.push(chunk.byteLength);
      return sizes;
    })();
    buffer.push(bytes(10));
    buffer.push(bytes(20));
    buffer.end();
    expect(await read).toEqual([10, 20]);
    expect(buffer.push(bytes(1))).toBe(false);
  });

  it("drops the stream, once, when a reader that never reads lets it pass its bound", async () => {
    let overflows = 0;
    const buffer = new EventBuffer(100, () => overflows++);
    for (let i = 0; i < 10; i++) expect(buffer.push(bytes(10))).toBe(true);
    expect(buffer.bytes).toBe(100);
    expect(buffer.push(bytes(1))).toBe(false);
    expect(overflows).toBe(1);
    expect(buffer.bytes).toBe(0);
    expect(buffer.ended).toBe(true);
    expect(buffer.push(bytes(1))).toBe(false);
    expect(overflows).toBe(1);
    const chunks = [];
    for await (const chunk of buffer) chunks.push(chunk);
    expect(chunks).toEqual([]);
  });
});
