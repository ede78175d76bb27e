// The repository API against hostile input: model names and `file:` keys that climb out of their
// folders, config overrides that name files outside the model, ensembles that depend on each
// other. Nothing may be written, read or deleted outside the model's folders, every failed load
// removes what it wrote, and a cycle answers at once instead of hanging.
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import fc from "fast-check";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { cleanup, EXAMPLES, expectGrpcError, type Running, startServer, tempRepository } from "./support/harness.js";

const SIXTEEN = Array.from({ length: 16 }, (_, i) => i);
const MODEL = readFileSync(join(EXAMPLES, "simple", "1", "model.onnx"));
const CONFIG = JSON.stringify({ backend: "onnxruntime", max_batch_size: 8 });

// Override folders go to os.tmpdir(): a private one per file shows exactly what a load leaves behind.
// It sits one level inside a private folder too, so what a traversal would write beside it
// (`<tmp>/../x`) is this file's alone to see.
const savedTmp = process.env.TMPDIR;
let privateRoot: string;
let privateTmp: string;
beforeAll(() => {
  privateRoot = mkdtempSync(join(tmpdir(), "galley-security-"));
  privateTmp = join(privateRoot, "tmp");
  mkdirSync(privateTmp);
  process.env.TMPDIR = privateTmp;
});
afterAll(() => {
  if (savedTmp === undefined) delete process.env.TMPDIR;
  else process.env.TMPDIR = savedTmp;
  rmSync(privateRoot, { recursive: true, force: true });
});
afterEach(cleanup);

const overrideFolders = () => readdirSync(privateTmp).filter((n) => n.startsWith("galley-model-"));

interface Reply {
  status: number;
  text: string;
}

/** POST exactly `path` (no normalisation, as curl --path-as-is) with a JSON body. */
function postRaw(port: number, path: string, body: unknown): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, method: "POST", path }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        text += chunk;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}

const httpPort = (s: Running) => Number(new URL(s.httpUrl ?? "").port);
const loadBody = (files: Record<string, Buffer>, config = CONFIG) => ({
  parameters: {
    config,
    ...Object.fromEntries(Object.entries(files).map(([k, v]) => [k, v.toString("base64")])),
  },
});

async function explicitServer(models: readonly string[] = ["simple"]): Promise<{ s: Running; repo: string }> {
  const repo = tempRepository(models);
  const s = await startServer({ modelRepositories: [repo], controlMode: "explicit", http: true });
  return { s, repo };
}

describe("model names and file: overrides", () => {
  it("refuses '..' as a model name before writing anything, and deletes nothing on unload", async () => {
    const { s } = await explicitServer();
    const canary = join(privateTmp, "canary");
    mkdirSync(canary);
    const load = await postRaw(httpPort(s), "/v2/repository/models/../load", loadBody({ "file:1/model.mjs": MODEL }));
    expect([load.status, load.text]).toEqual([
      400,
      `{"error":"invalid model name '..', model name must not contain path traversal characters"}`,
    ]);
    const unload = await postRaw(httpPort(s), "/v2/repository/models/../unload", {});
    expect(unload.status).toBe(200);
    expect(existsSync(canary)).toBe(true);
    expect(overrideFolders()).toEqual([]);
    rmSync(canary, { recursive: true });
  });

  it("refuses names with separators, '..', NUL, a leading dot or only spaces over HTTP and gRPC", async () => {
    const { s } = await explicitServer();
    // `\\` separates paths on Windows only (elsewhere it is an ordinary character, as in Triton).
    const backslash = process.platform === "win32" ? ["a\\b"] : [];
    const names = ["../../x", "a/b", ...backslash, "a..b", ".hidden", "x\0y", "   "];
    const expected = (name: string) =>
      name.trim() === ""
        ? "model name must not contain only whitespace characters"
        : `invalid model name '${name.replace("\0", "\\0")}', model name must not contain path traversal characters`;
    for (const name of names) {
      await expectGrpcError(
        s.client.repositoryModelLoad({
          modelName: name,
          parameters: {
            config: { parameterChoice: { case: "stringParam", value: CONFIG } },
            "file:1/model.onnx": { parameterChoice: { case: "bytesParam", value: MODEL } },
          },
        }),
        Code.InvalidArgument,
        expected(name),
      );
    }
    // Triton's REST frontend does not decode the model name in the path: what arrives is the name.
    for (const name of ["..", "a..b", ".hidden", ...backslash, "..%2F..%2Fx"]) {
      const http = await postRaw(
        httpPort(s),
        `/v2/repository/models/${name}/load`,
        loadBody({ "file:1/model.onnx": MODEL }),
      );
      expect([http.status, http.text], name).toEqual([400, JSON.stringify({ error: expected(name) })]);
    }
    await expectGrpcError(
      s.client.repositoryModelLoad({ modelName: "" }),
      Code.InvalidArgument,
      "model name must not be empty",
    );
    expect(overrideFolders()).toEqual([]);
    expect(existsSync(join(privateTmp, "..", "x"))).toBe(false);
  });

  it("keeps every file: path inside the model folder, with Triton's text, and leaves nothing behind", async () => {
    const { s } = await explicitServer();
    for (const key of ["file:../evil.onnx", "file:1/../../evil.onnx", "file:/../etc/evil", "file:1/../../../x"]) {
      const r = await postRaw(httpPort(s), "/v2/repository/models/evil/load", loadBody({ [key]: MODEL }));
      expect(r.status, key).toBe(400);
      expect(JSON.parse(r.text).error, key).toMatch(
        new RegExp(
          `^Invalid file parameter '${key.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}' with normalized path '.+' must stay within model directory\\.$`,
        ),
      );
    }
    const asFile = await postRaw(
      httpPort(s),
      "/v2/repository/models/evil/load",
      loadBody({ "file:1": MODEL, "file:1/model.onnx": MODEL }),
    );
    expect([asFile.status, asFile.text]).toEqual([
      400,
      `{"error":"Invalid file parameter 'file:1/model.onnx', directory has been created as a file"}`,
    ]);
    const noConfig = await postRaw(httpPort(s), "/v2/repository/models/evil/load", {
      parameters: { "file:1/model.onnx": MODEL.toString("base64") },
    });
    expect([noConfig.status, noConfig.text]).toEqual([
      400,
      `{"error":"Load parameter 'config' must be specified for model file override"}`,
    ]);
    expect(overrideFolders()).toEqual([]);
  });

  it("takes a leading slash in a file: key as the model folder's root, as Triton's JoinPath (issue 48, item 13)", async () => {
    const { s } = await explicitServer();
    const port = httpPort(s);
    const load = await postRaw(
      port,
      "/v2/repository/models/rooted/load",
      loadBody({ "file:/1/model.onnx": MODEL, "file://notes/readme.txt": Buffer.from("kept inside") }),
    );
    expect([load.status, load.text]).toEqual([200, ""]);
    const [folder] = overrideFolders();
    expect(readFileSync(join(privateTmp, folder ?? "", "rooted", "notes", "readme.txt"), "utf8")).toBe("kept inside");
    const infer = await postRaw(port, "/v2/models/rooted/infer", {
      inputs: [
        { name: "INPUT0", shape: [1, 16], datatype: "INT32", data: SIXTEEN },
        { name: "INPUT1", shape: [1, 16], datatype: "INT32", data: SIXTEEN },
      ],
    });
    expect(infer.status).toBe(200);
    expect(JSON.parse(infer.text).outputs[0].data).toEqual(SIXTEEN.map((v) => 2 * v));
  });

  it("removes the folder of a failed override load, of an unload, of a replaced override, and at shutdown", async () => {
    const { s } = await explicitServer();
    const port = httpPort(s);
    const broken = await postRaw(
      port,
      "/v2/repository/models/copy/load",
      loadBody({ "file:1/model.onnx": Buffer.from("not onnx") }),
    );
    expect(JSON.parse(broken.text).error).toContain("Protobuf parsing failed");
    expect(overrideFolders()).toEqual([]);
    const badConfig = await postRaw(
      port,
      "/v2/repository/models/copy/load",
      loadBody({ "file:1/model.onnx": MODEL }, JSON.stringify({ backend: "onnxruntime", max_batch_size: -3 })),
    );
    expect(badConfig.status).toBe(500);
    expect(overrideFolders()).toEqual([]);

    expect(
      (await postRaw(port, "/v2/repository/models/copy/load", loadBody({ "file:1/model.onnx": MODEL }))).status,
    ).toBe(200);
    const first = overrideFolders();
    expect(first).toHaveLength(1);
    expect(
      (await postRaw(port, "/v2/repository/models/copy/load", loadBody({ "file:1/model.onnx": MODEL }))).status,
    ).toBe(200);
    const second = overrideFolders();
    expect(second).toHaveLength(1);
    expect(second).not.toEqual(first);
    const infer = await postRaw(port, "/v2/models/copy/infer", {
      inputs: [
        { name: "INPUT0", shape: [1, 16], datatype: "INT32", data: SIXTEEN },
        { name: "INPUT1", shape: [1, 16], datatype: "INT32", data: SIXTEEN },
      ],
    });
    expect(JSON.parse(infer.text).outputs[0].data).toEqual(SIXTEEN.map((v) => 2 * v));
    expect((await postRaw(port, "/v2/repository/models/copy/unload", {})).status).toBe(200);
    expect(overrideFolders()).toEqual([]);

    expect(
      (await postRaw(port, "/v2/repository/models/copy/load", loadBody({ "file:1/model.onnx": MODEL }))).status,
    ).toBe(200);
    expect(overrideFolders()).toHaveLength(1);
    await s.close();
    expect(overrideFolders()).toEqual([]);
  });

  it("never writes outside the temporary folder, whatever the name and keys (property)", async () => {
    const { s } = await explicitServer();
    const port = httpPort(s);
    const segment = fc.constantFrom("..", ".", "", "a", "1", "model.onnx", "%2e%2e", "\0", "\\..", " ");
    const path = fc.array(segment, { minLength: 1, maxLength: 5 }).map((parts) => parts.join("/"));
    await fc.assert(
      fc.asyncProperty(path, fc.array(path, { minLength: 1, maxLength: 3 }), async (name, keys) => {
        const r = await postRaw(
          port,
          `/v2/repository/models/${encodeURIComponent(name)}/load`,
          loadBody(Object.fromEntries(keys.map((k) => [`file:${k}`, Buffer.from("x")]))),
        );
        expect([400, 404, 500]).toContain(r.status);
        expect(JSON.parse(r.text).error).toEqual(expect.any(String));
        expect(overrideFolders()).toEqual([]);
        expect(existsSync(join(privateTmp, "a"))).toBe(false);
        expect(existsSync(join(privateTmp, "1"))).toBe(false);
      }),
      { numRuns: 150 },
    );
  });
});

describe("config overrides", () => {
  it("answers any JSON override with Triton's load error or a load, never an engine's text, and keeps serving", async () => {
    const { s } = await explicitServer();
    const port = httpPort(s);
    const valid = { backend: "onnxruntime", max_batch_size: 8 };
    const override = fc.oneof(
      fc.string({ maxLength: 40 }),
      fc.json({ maxDepth: 3 }),
      fc
        .dictionary(
          fc.constantFrom("max_batch_size", "backend", "input", "output", "instance_group", "dynamic_batching", "name"),
          fc.jsonValue({ maxDepth: 2 }),
        )
        .map((extra) => JSON.stringify({ ...valid, ...extra })),
    );
    await fc.assert(
      fc.asyncProperty(override, async (config) => {
        const r = await postRaw(port, "/v2/repository/models/simple/load", { parameters: { config } });
        expect([200, 400, 500]).toContain(r.status);
        if (r.status !== 200) {
          const error = JSON.parse(r.text).error as string;
          expect(error).toMatch(/^(failed to load 'simple', |load failed for model 'simple': )/);
          expect(error).not.toMatch(
            /Unexpected token|" is not valid JSON|Cannot read propert|undefined|Unexpected end/,
          );
        }
        const ready = await postRaw(port, "/v2/repository/index", { ready: true });
        expect(ready.status).toBe(200);
      }),
      { numRuns: 60 },
    );
    // The model keeps (or gets back) a working version.
    expect((await postRaw(port, "/v2/repository/models/simple/load", { parameters: { config: CONFIG } })).status).toBe(
      200,
    );
    const infer = await postRaw(port, "/v2/models/simple/infer", {
      inputs: [
        { name: "INPUT0", shape: [1, 16], datatype: "INT32", data: SIXTEEN },
        { name: "INPUT1", shape: [1, 16], datatype: "INT32", data: SIXTEEN },
      ],
    });
    expect(JSON.parse(infer.text).outputs[0].data).toEqual(SIXTEEN.map((v) => 2 * v));
  });
});

describe("files a config names", () => {
  it("refuses a label_filename, default_model_filename, warmup or initial-state file outside the model", async () => {
    const { s } = await explicitServer(["mlp_classifier", "simple"]);
    const port = httpPort(s);
    const config = JSON.parse(JSON.stringify({ backend: "onnxruntime", max_batch_size: 64 }));
    const cases: [string, unknown, string][] = [
      [
        "mlp_classifier",
        {
          ...config,
          output: [
            {
              name: "PROBABILITIES",
              data_type: "TYPE_FP32",
              dims: [10],
              label_filename: "../../../../../../../../etc/passwd",
            },
          ],
        },
        "label_filename '../../../../../../../../etc/passwd' must name a file inside the model folder",
      ],
      [
        "simple",
        { ...config, default_model_filename: "../../../../etc/passwd" },
        "default_model_filename '../../../../etc/passwd' must name a file inside the model's '1' folder",
      ],
      [
        "simple",
        { ...config, default_model_filename: "/etc/passwd" },
        "default_model_filename '/etc/passwd' must name a file inside the model's '1' folder",
      ],
    ];
    for (const [model, override, message] of cases) {
      const r = await postRaw(port, `/v2/repository/models/${model}/load`, {
        parameters: { config: JSON.stringify(override) },
      });
      expect(r.status, message).toBe(500);
      expect(JSON.parse(r.text).error).toBe(
        `failed to load '${model}', failed to poll from model repository: ${message}`,
      );
    }
  });

  it("refuses a label file that is a symbolic link out of the model folder", async () => {
    const repo = tempRepository(["mlp_classifier"]);
    const labels = readFileSync(join(repo, "mlp_classifier", "config.pbtxt"), "utf8").match(
      /label_filename: "([^"]+)"/,
    )?.[1];
    expect(labels).toBeDefined();
    rmSync(join(repo, "mlp_classifier", labels as string));
    symlinkSync("/etc/passwd", join(repo, "mlp_classifier", labels as string));
    const s = await startServer({ modelRepositories: [repo], controlMode: "explicit", http: true });
    const r = await postRaw(httpPort(s), "/v2/repository/models/mlp_classifier/load", {});
    expect(r.status).toBe(400);
    expect(JSON.parse(r.text).error).toContain(`label_filename '${labels}' leads out of the model folder`);
  });
});

describe("ensembles that depend on each other", () => {
  const ensemble = (name: string, step: string) => `name: "${name}"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [ { model_name: "${step}" model_version: -1 input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "OUT" } } ] }
`;

  it("answers Triton's circular-dependency error at once, and the server keeps serving", async () => {
    const repo = tempRepository(["simple"]);
    for (const [name, step] of [
      ["cyc_a", "cyc_b"],
      ["cyc_b", "cyc_c"],
      ["cyc_c", "cyc_a"],
    ]) {
      mkdirSync(join(repo, name as string, "1"), { recursive: true });
      writeFileSync(join(repo, name as string, "config.pbtxt"), ensemble(name as string, step as string));
    }
    const s = await startServer({
      modelRepositories: [repo],
      controlMode: "explicit",
      loadModels: ["simple"],
      http: true,
    });
    const port = httpPort(s);
    const cycle =
      /^load failed for model 'cyc_a': circular dependency between ensembles: cyc_a -> \.\.\. -> cyc_c -> cyc_a$/;
    const first = await postRaw(port, "/v2/repository/models/cyc_a/load", {});
    expect(first.status).toBe(400);
    expect(JSON.parse(first.text).error).toMatch(cycle);
    expect((await postRaw(port, "/v2/repository/models/cyc_a/unload", {})).status).toBe(200);
    await expectGrpcError(
      s.client.repositoryModelLoad({ modelName: "cyc_b" }),
      Code.InvalidArgument,
      /^load failed for model 'cyc_b': circular dependency between ensembles: cyc_b -> \.\.\. -> cyc_a -> cyc_b$/,
    );
    const again = await postRaw(port, "/v2/repository/models/cyc_a/load", {});
    expect(JSON.parse(again.text).error).toMatch(cycle);
    const index = (await s.client.repositoryIndex({})).models.filter((m) => m.name.startsWith("cyc_"));
    expect(index.map((m) => [m.name, m.state])).toEqual([
      ["cyc_a", "UNAVAILABLE"],
      ["cyc_b", "UNAVAILABLE"],
      ["cyc_c", "UNAVAILABLE"],
    ]);
    expect((await s.client.modelReady({ name: "simple" })).ready).toBe(true);
  });
});
