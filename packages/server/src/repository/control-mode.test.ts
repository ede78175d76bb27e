import { describe, expect, it } from "vitest";
import { startupModels } from "./control-mode.js";

describe("startupModels", () => {
  it("loads every model found, except in explicit mode, which loads --load-model ('*' for all)", () => {
    const found = ["a", "b"];
    expect(startupModels("none", found, ["a"])).toEqual(["a", "b"]);
    expect(startupModels("poll", found)).toEqual(["a", "b"]);
    expect(startupModels("explicit", found)).toEqual([]);
    expect(startupModels("explicit", found, ["b", "missing"])).toEqual(["b", "missing"]);
    expect(startupModels("explicit", found, ["*"])).toEqual(["a", "b"]);
  });
});
