// The published declarations as a Node-only user sees them: `tsc --noEmit` over a small consumer
// with `"lib": ["ES2023"]`, `"types": ["node"]` and `skipLibCheck: false`, against the built
// `dist/*.d.ts` (build first). Galley's own declarations need no DOM type. @connectrpc/connect's
// name the global `HeadersInit`, which @types/node leaves out; `@galley/client/node-globals`
// declares it, and with the DOM lib nothing is needed.
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = fileURLToPath(new URL("../../..", import.meta.url));
const app = mkdtempSync(join(tmpdir(), "galley-client-types-"));
mkdirSync(join(app, "node_modules/@galley"), { recursive: true });
symlinkSync(join(root, "packages/client"), join(app, "node_modules/@galley/client"));
writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));

afterAll(() => rmSync(app, { recursive: true, force: true }));

const CONSUMER = `import {
  Code,
  ConnectError,
  createGrpcClient,
  createRestClient,
  type InferResult,
  SystemSharedMemory,
  tensor,
} from "@galley/client";
const rest = createRestClient({ baseUrl: "http://127.0.0.1:8000", defaultTimeoutMs: 1000 });
const grpc = createGrpcClient({ baseUrl: "http://127.0.0.1:8001" });
const response: Response = await rest.request("GET", "/v2");
const result: InferResult = await grpc.infer("simple", { inputs: { INPUT0: tensor.int32([1], [1]) }, signal: AbortSignal.timeout(5) });
const failed = (e: unknown): boolean => e instanceof ConnectError && e.code === Code.DeadlineExceeded;
export { failed, response, result, SystemSharedMemory };
`;

/** Type-check the consumer (plus `extra` lines) under `lib`; the errors tsc prints. */
async function check(name: string, lib: string[], extra = ""): Promise<string[]> {
  writeFileSync(join(app, `${name}.ts`), extra + CONSUMER);
  writeFileSync(
    join(app, `${name}.json`),
    JSON.stringify({
      compilerOptions: {
        target: "ES2023",
        lib,
        module: "NodeNext",
        moduleResolution: "NodeNext",
        strict: true,
        skipLibCheck: false,
        noEmit: true,
        types: ["node"],
        typeRoots: [join(root, "node_modules/@types")],
      },
      files: [`${name}.ts`],
    }),
  );
  const tsc = join(root, "node_modules/.bin/tsc");
  const { stdout } = await run(tsc, ["-p", `${name}.json`], { cwd: app }).catch((e: { stdout: string }) => e);
  return stdout.split("\n").filter((line) => line.includes("error TS"));
}

describe("the published types", () => {
  it("check without the DOM lib and with skipLibCheck: false, with @galley/client/node-globals", async () => {
    // Through the dist path: package.json's exports name the entry point for users.
    const shim = `/// <reference path="./node_modules/@galley/client/dist/node-globals.d.ts" />\n`;
    expect(await check("node-only", ["ES2023"], shim)).toEqual([]);
  }, 60_000);

  it("fail without it only where @connectrpc/connect names HeadersInit, never in Galley's own", async () => {
    const errors = await check("bare", ["ES2023"]);
    expect(errors.length).toBeGreaterThan(0);
    for (const error of errors) {
      expect(error).toMatch(
        /@connectrpc\/connect\/dist\/esm\/[a-z-]+\.d\.ts\(\d+,\d+\): error TS2304: Cannot find name 'HeadersInit'\./,
      );
    }
  }, 60_000);

  it("check with the DOM lib, which declares HeadersInit itself", async () => {
    expect(await check("dom", ["ES2023", "DOM"])).toEqual([]);
  }, 60_000);
});
