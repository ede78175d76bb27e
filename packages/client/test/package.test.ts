// Packaging: `npm pack` this package (and @galley/proto, which it depends on), install the
// tarballs into a fresh app outside the workspace, type-check the app against the published types
// and run it from ESM against a real server — as a user would.
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { createLogger, createServer, type GalleyServer } from "@galley/server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = fileURLToPath(new URL("../../..", import.meta.url));
const app = mkdtempSync(join(tmpdir(), "galley-client-app-"));
let server: GalleyServer;
let grpcUrl = "";

beforeAll(async () => {
  server = createServer({
    modelRepositories: [join(root, "examples/model_repository")],
    http: false,
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: createLogger({ write: () => {} }),
  });
  grpcUrl = `http://127.0.0.1:${(await server.listen()).grpc?.port}`;
}, 60_000);

afterAll(async () => {
  await server.close();
  rmSync(app, { recursive: true, force: true });
});

describe("the packed client", () => {
  it("installs from its tarball and works from ESM with types", async () => {
    const packed: string[] = [];
    for (const workspace of ["proto", "packages/client"]) {
      const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", app], {
        cwd: join(root, workspace),
      });
      packed.push(join(app, (JSON.parse(stdout) as { filename: string }[])[0]?.filename ?? ""));
    }
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    // Dependencies come from the npm cache the workspace install filled (or the registry).
    await run(
      "npm",
      [
        "install",
        "--prefer-offline",
        "--no-audit",
        "--no-fund",
        "--ignore-scripts",
        ...packed,
        "typescript@5.9.3",
        "@types/node@20",
      ],
      { cwd: app, timeout: 240_000 },
    );
    writeFileSync(
      join(app, "main.ts"),
      `import { createGrpcClient, tensor, type InferResult } from "@galley/client";
const client = createGrpcClient({ baseUrl: process.argv[2] ?? "" });
const result: InferResult = await client.infer("simple", {
  inputs: { INPUT0: tensor.int32([1, 16], new Int32Array(16).fill(2)), INPUT1: tensor.int32([1, 16], new Int32Array(16).fill(1)) },
});
const sum: Int32Array = result.output("OUTPUT0").int32();
console.log(JSON.stringify({ sum: sum[0], ready: await client.isServerReady() }));
`,
    );
    writeFileSync(
      join(app, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          target: "ES2023",
          module: "NodeNext",
          moduleResolution: "NodeNext",
          strict: true,
          types: ["node"],
        },
        files: ["main.ts"],
      }),
    );
    await run(join(app, "node_modules/.bin/tsc"), ["-p", "."], { cwd: app });
    const { stdout } = await run(process.execPath, [join(app, "main.js"), grpcUrl], { cwd: app });
    expect(JSON.parse(stdout)).toEqual({ sum: 3, ready: true });
  }, 300_000);
});
