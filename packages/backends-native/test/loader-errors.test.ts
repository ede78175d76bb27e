// A separate file so the module-level cache of a successful load does not hide the failure path.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadBinding } from "../src/binding.js";

describe("loadBinding failures", () => {
  it("throws one message naming every candidate tried and what to do", () => {
    const dir = mkdtempSync(join(tmpdir(), "galley-native-"));
    const corrupt = join(dir, "corrupt.node");
    writeFileSync(corrupt, "not an ELF file");
    const missing = join(dir, "missing.node");
    let message = "";
    try {
      loadBinding([missing, corrupt]);
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).toMatch(/Could not load Galley's native addon/);
    expect(message).toContain(`${missing}: Cannot find module`);
    expect(message).toContain(`${corrupt}:`);
    expect(message).toMatch(/npm run build -w @galley\/backends-native/);
  });
});
