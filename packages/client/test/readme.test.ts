// README code samples are tests: each ```ts block of README.md runs as a module against a real
// server (the example repository, shared memory allowed), importing this package's source under
// its published name.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { createLogger, createServer, type GalleyServer } from "@galley/server";
import { tsImport } from "tsx/esm/api";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const readme = readFileSync(fileURLToPath(new URL("../README.md", import.meta.url)), "utf8");
const source = fileURLToPath(new URL("../src/index.ts", import.meta.url));
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

let server: GalleyServer;
let urls: { grpc: string; http: string };

beforeAll(async () => {
  server = createServer({
    modelRepositories: [fileURLToPath(new URL("../../../examples/model_repository", import.meta.url))],
    allowClientShm: true,
    http: { host: "127.0.0.1", port: 0 },
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: createLogger({ write: () => {} }),
  });
  const { grpc, http } = await server.listen();
  urls = { grpc: `http://127.0.0.1:${grpc?.port}`, http: `http://127.0.0.1:${http?.port}` };
}, 60_000);

afterAll(async () => {
  await server.close();
});

describe("README.md samples", () => {
  it("has samples to run", () => {
    expect(blocks.length).toBeGreaterThanOrEqual(5);
  });

  it.each(blocks)(
    "$title",
    async ({ code }) => {
      const dir = mkdtempSync(fileURLToPath(new URL("./.readme-", import.meta.url)));
      try {
        const file = join(dir, "sample.mts");
        writeFileSync(
          file,
          code
            .replaceAll('from "@galley/client"', `from ${JSON.stringify(source)}`)
            .replaceAll("http://localhost:8001", urls.grpc)
            .replaceAll("http://localhost:8000", urls.http),
        );
        await tsImport(pathToFileURL(file).href, import.meta.url);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
    30_000,
  );
});
