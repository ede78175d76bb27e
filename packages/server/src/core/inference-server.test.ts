import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { GALLEY_VERSION } from "./inference-server.js";

describe("GALLEY_VERSION", () => {
  it("is the version in packages/server/package.json", () => {
    const pkg = JSON.parse(readFileSync(`${import.meta.dirname}/../../package.json`, "utf8")) as {
      name: string;
      version: string;
    };
    expect(pkg.name).toBe("@galley/server");
    expect(GALLEY_VERSION).toBe(pkg.version);
    expect(GALLEY_VERSION).toMatch(/^\d+\.\d+\.\d+/);
  });
});
