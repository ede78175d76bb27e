// README code samples are tests: each ```ts block of README.md runs as a module, importing this
// package's source under its published name.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { tsImport } from "tsx/esm/api";
import { describe, expect, it } from "vitest";

const readme = readFileSync(fileURLToPath(new URL("../README.md", import.meta.url)), "utf8");
const source = fileURLToPath(new URL("../src/index.ts", import.meta.url));
const torchSource = fileURLToPath(new URL("../src/torch.ts", import.meta.url));
const blocks = [...readme.matchAll(/^## (.+)$|^```ts\n([\s\S]*?)^```$/gm)]
  .reduce<{ title: string; code: string }[]>((found, match) => {
    if (match[1]) found.push({ title: match[1], code: "" });
    else if (match[2] && found.length > 0) {
      const last = found[found.length - 1];
      if (last) last.code += match[2];
    }
    return found;
  }, [])
  .filter((b) => b.code !== "");

describe("README.md samples", () => {
  it("has samples to run", () => {
    expect(blocks.map((b) => b.title)).toEqual([
      "probeCuda()",
      "mapSharedMemory()",
      "sharedMemoryMapping()",
      "sampleGpus()",
      "sampleGpuMemory()",
      "torchSupport()",
      "loadTorchModel()",
      "torchDirect()",
      "torchCudaMemory()",
    ]);
  });

  it.each(blocks)("$title", async ({ code }) => {
    const dir = mkdtempSync(fileURLToPath(new URL("./.readme-", import.meta.url)));
    try {
      const file = join(dir, "sample.mts");
      writeFileSync(
        file,
        code
          .replaceAll('from "@galley/backends-native"', `from ${JSON.stringify(source)}`)
          .replaceAll('from "@galley/backends-native/torch"', `from ${JSON.stringify(torchSource)}`),
      );
      await tsImport(pathToFileURL(file).href, import.meta.url);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
