import { describe, expect, it } from "vitest";
import { createAsyncQueue } from "./async-queue.js";

async function readAll<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const seen: T[] = [];
  for await (const item of iterable) seen.push(item);
  return seen;
}

describe("createAsyncQueue", () => {
  it("reads what was pushed before reading began, in order, then ends after end()", async () => {
    const queue = createAsyncQueue<number>();
    queue.push(1);
    queue.push(2);
    queue.end();
    expect(await readAll(queue)).toEqual([1, 2]);
  });

  it("wakes a waiting reader on push and on end", async () => {
    const queue = createAsyncQueue<string>();
    const reader = queue[Symbol.asyncIterator]();
    const first = reader.next();
    queue.push("a");
    expect(await first).toEqual({ value: "a", done: false });
    const second = reader.next();
    queue.end();
    expect(await second).toEqual({ value: undefined, done: true });
  });

  it("keeps falsy items (0, empty string, undefined)", async () => {
    const queue = createAsyncQueue<number | string | undefined>();
    for (const item of [0, "", undefined, 3]) queue.push(item);
    queue.end();
    expect(await readAll(queue)).toEqual([0, "", undefined, 3]);
  });

  it("reads items pushed after end() while the reader has not drained the queue", async () => {
    const queue = createAsyncQueue<number>();
    queue.push(1);
    queue.end();
    const reader = queue[Symbol.asyncIterator]();
    expect(await reader.next()).toEqual({ value: 1, done: false });
    queue.push(2);
    expect(await reader.next()).toEqual({ value: 2, done: false });
    expect(await reader.next()).toEqual({ value: undefined, done: true });
  });

  it("interleaves pushes from another task with reads", async () => {
    const queue = createAsyncQueue<number>();
    const producer = (async () => {
      for (let i = 0; i < 100; i++) {
        queue.push(i);
        if (i % 7 === 0) await Promise.resolve();
      }
      queue.end();
    })();
    const seen = await readAll(queue);
    await producer;
    expect(seen).toEqual(Array.from({ length: 100 }, (_, i) => i));
  });

  it("lets a reader stop early with break", async () => {
    const queue = createAsyncQueue<number>();
    for (const i of [1, 2, 3]) queue.push(i);
    const seen: number[] = [];
    for await (const item of queue) {
      seen.push(item);
      if (item === 2) break;
    }
    expect(seen).toEqual([1, 2]);
  });
});
