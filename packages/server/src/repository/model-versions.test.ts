import { describe, expect, it } from "vitest";
import type { InferenceError } from "../base/errors.js";
import type { LoadedModel } from "./loaded-model.js";
import { ModelVersions } from "./model-versions.js";

/** A READY version that records its unload. */
function version(n: number, unloaded: number[]): LoadedModel {
  return { version: n, unload: async () => void unloaded.push(n) } as unknown as LoadedModel;
}

const errorId = (run: () => unknown) => {
  try {
    run();
  } catch (error) {
    return (error as InferenceError).id;
  }
  return undefined;
};

describe("ModelVersions", () => {
  it("is unknown until a load is tried, and then resolves the highest READY version", () => {
    const versions = new ModelVersions("m");
    expect(errorId(() => versions.resolve(""))).toBe("MODEL_NOT_FOUND");
    expect(versions.rows(false)).toEqual([{ name: "m" }]);
    expect(versions.rows(true)).toEqual([]);
    const unloaded: number[] = [];
    for (const n of [1, 2, 3]) versions.loading(n);
    versions.loaded(1);
    versions.loaded(2);
    versions.failed(3, "broken");
    versions.swap(
      new Map([
        [1, version(1, unloaded)],
        [2, version(2, unloaded)],
      ]),
    );
    expect(versions.resolve("").version).toBe(2);
    expect(versions.resolve("1").version).toBe(1);
    expect(errorId(() => versions.resolve("3"))).toBe("MODEL_VERSION_NOT_READY");
    expect(errorId(() => versions.resolve("4"))).toBe("MODEL_VERSION_NOT_FOUND");
    expect(errorId(() => versions.resolve("x"))).toBe("BAD_VERSION");
    expect(versions.allReady).toBe(false);
    expect(versions.rows(true).map((r) => r.version)).toEqual(["1", "2"]);
    expect(versions.rows(false)[2]).toEqual({ name: "m", version: "3", state: "UNAVAILABLE", reason: "broken" });
  });

  it("retires the versions a reload drops, and an unload leaves every version UNAVAILABLE 'unloaded'", async () => {
    const versions = new ModelVersions("m");
    const unloaded: number[] = [];
    versions.loaded(1);
    versions.loaded(2);
    versions.swap(
      new Map([
        [1, version(1, unloaded)],
        [2, version(2, unloaded)],
      ]),
    );
    versions.loaded(2);
    const current = new Map([[2, version(2, unloaded)]]);
    await versions.retire(versions.swap(current), current);
    expect(unloaded).toEqual([1, 2]);
    expect(versions.states.get(1)).toEqual({ state: "UNAVAILABLE", reason: "unloaded" });
    expect(versions.states.get(2)?.state).toBe("READY");
    expect(versions.allReady).toBe(true);
    expect(await versions.unloadAll("unloaded")).toBe(1);
    expect([...versions.states.values()].every((s) => s.reason === "unloaded")).toBe(true);
    expect(versions.allReady).toBe(true);
    expect(errorId(() => versions.resolve(""))).toBe("MODEL_NO_VERSIONS");
  });

  it("keeps serving versions READY through a failed reload or a failed poll", () => {
    const versions = new ModelVersions("m");
    versions.loaded(1);
    versions.swap(new Map([[1, version(1, [])]]));
    versions.pollFailed([1, 2], "bad config");
    expect(versions.states.get(2)).toBeUndefined();
    versions.loading(1);
    versions.failed(1, "no");
    versions.keepServing();
    expect(versions.states.get(1)?.state).toBe("READY");
    const fresh = new ModelVersions("n");
    fresh.pollFailed([1], "bad config");
    expect(fresh.states.get(1)).toEqual({ state: "UNAVAILABLE", reason: "bad config" });
  });
});
