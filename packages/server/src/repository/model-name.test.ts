import { describe, expect, it } from "vitest";
import { validateModelName } from "./model-name.js";

describe("validateModelName", () => {
  const traversal = (name: string) =>
    `invalid model name '${name}', model name must not contain path traversal characters`;

  it("refuses `\\` only where it separates paths; elsewhere it is an ordinary character, as in Triton", () => {
    expect(() => validateModelName("a\\b", "win32")).toThrow(traversal("a\\b"));
    expect(() => validateModelName("a\\b", "linux")).not.toThrow();
    for (const platform of ["linux", "win32"] as const) {
      for (const name of ["a/b", "..", "a..b", ".hidden"]) {
        expect(() => validateModelName(name, platform), name).toThrow(traversal(name));
      }
      // The Python backend refuses shell metacharacters in its stubs' names; the repository does not.
      expect(() => validateModelName("model;test", platform)).not.toThrow();
    }
  });
});
