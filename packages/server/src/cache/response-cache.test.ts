import { describe, expect, it } from "vitest";
import type { InferenceRequest } from "../base/inference-request.js";
import type { Tensor } from "../base/tensor.js";
import { ResponseCache } from "./response-cache.js";

const tensor = (name: string, bytes: number[]): Tensor => ({
  name,
  datatype: "UINT8",
  shape: [bytes.length],
  data: Uint8Array.from(bytes),
  parameters: {},
  movable: true,
});
const request = (bytes: number[], parameters: InferenceRequest["parameters"] = {}): InferenceRequest => ({
  modelName: "m",
  modelVersion: "",
  id: "any",
  parameters,
  inputs: [tensor("X", bytes)],
  outputs: [],
});

describe("ResponseCache", () => {
  it("keys on model, version, input bytes and result-affecting parameters, not on id, priority or timeout", () => {
    const cache = new ResponseCache(1 << 20);
    const base = cache.key(request([1, 2, 3]), "m", 1);
    expect(cache.key({ ...request([1, 2, 3]), id: "other" }, "m", 1)).toBe(base);
    expect(cache.key(request([1, 2, 3], { priority: 1, timeout: 10 }), "m", 1)).toBe(base);
    expect(cache.key(request([1, 2, 4]), "m", 1)).not.toBe(base);
    expect(cache.key(request([1, 2, 3]), "m", 2)).not.toBe(base);
    expect(cache.key(request([1, 2, 3]), "n", 1)).not.toBe(base);
    expect(cache.key(request([1, 2, 3], { temperature: 0.5 }), "m", 1)).not.toBe(base);
    expect(cache.key({ ...request([1, 2, 3]), outputs: [{ name: "Y", parameters: {} }] }, "m", 1)).not.toBe(base);
  });

  it("keeps private, unmovable copies of the outputs", () => {
    const cache = new ResponseCache(1 << 20);
    const output = tensor("Y", [9, 9]);
    cache.put("k", [output]);
    output.data[0] = 0;
    const cached = cache.get("k");
    expect([...(cached?.[0]?.data ?? [])]).toEqual([9, 9]);
    expect(cached?.[0]?.movable).toBe(false);
  });

  it("evicts the least recently used entries to stay within its byte capacity", () => {
    const entry = (k: number) => [tensor("Y", new Array(100).fill(k))];
    const cache = new ResponseCache(3 * (100 + 1 + 64));
    cache.put("a", entry(1));
    cache.put("b", entry(2));
    cache.put("c", entry(3));
    expect(cache.size).toBe(3);
    cache.get("a");
    cache.put("d", entry(4));
    expect(cache.get("b")).toBeUndefined();
    expect(cache.get("a")?.[0]?.data[0]).toBe(1);
    expect(cache.size).toBe(3);
    expect(cache.bytes).toBeLessThanOrEqual(cache.capacityBytes);
    cache.put("huge", [tensor("Y", new Array(1000).fill(0))]);
    expect(cache.get("huge")).toBeUndefined();
  });
});
