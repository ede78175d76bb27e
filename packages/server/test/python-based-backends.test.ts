// Triton's Python-based backends (issue 48, L0_backend_python/python_based_backends): with
// `--backend-directory`, a config whose backend is none of Galley's own runs
// `<directory>/<backend>/model.py` with the Python backend; Galley's own backends win; a name found
// nowhere fails with Triton's words. And the stub names Triton's Python backend refuses, before
// any model.py runs (L0_backend_python/model_control).
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { parseBackendConfig } from "../src/cli/backend-config.js";
import { parseServeArgs } from "../src/cli/serve-options.js";
import { copyPythonModels, pythonWithNumpy } from "./python-harness.js";
import {
  cleanup,
  fp32Bytes,
  grpcFailure,
  readBytesTensor,
  readFp32,
  startServer,
  tempRepository,
} from "./support/harness.js";

const python = pythonWithNumpy();
const BACKENDS = fileURLToPath(new URL("./fixtures/python_backends", import.meta.url));

afterEach(cleanup);

/** A model of the `add_sub` Python-based backend: only a config and, per version, its model.json. */
function addSubModel(repo: string, name: string, operation: "add" | "sub", versions = [1]): void {
  mkdirSync(join(repo, name));
  writeFileSync(join(repo, name, "config.pbtxt"), 'backend: "add_sub"\n');
  for (const v of versions) {
    mkdirSync(join(repo, name, String(v)));
    writeFileSync(join(repo, name, String(v), "model.json"), JSON.stringify({ operation }));
  }
}

async function run(client: Awaited<ReturnType<typeof startServer>>["client"], model: string, version = "") {
  const reply = await client.modelInfer({
    modelName: model,
    modelVersion: version,
    inputs: [
      { name: "INPUT0", datatype: "FP32", shape: [4n] },
      { name: "INPUT1", datatype: "FP32", shape: [4n] },
    ],
    outputs: [{ name: "OUTPUT" }, { name: "WHERE" }],
    rawInputContents: [fp32Bytes([5, 6, 7, 8]), fp32Bytes([1, 2, 3, 4])],
  });
  return {
    out: readFp32(reply.rawOutputContents[0]),
    where: JSON.parse(readBytesTensor(reply.rawOutputContents[1])[0] ?? "") as Record<string, string>,
  };
}

describe("Python-based backends (--backend-directory)", () => {
  it("runs <directory>/<backend>/model.py for each model that names the backend, auto-completed, with the model's own folder", async () => {
    const repo = tempRepository();
    addSubModel(repo, "add", "add", [1, 2]);
    addSubModel(repo, "sub", "sub");
    const { client, failedModels } = await startServer({
      modelRepositories: [repo],
      backendDirectory: BACKENDS,
      pythonExecutable: python,
      controlMode: "explicit",
    });
    expect(failedModels).toEqual([]);
    // As Triton's suite loads it: a config given with the load, two versions.
    await client.repositoryModelLoad({
      modelName: "add",
      parameters: {
        config: {
          parameterChoice: {
            case: "stringParam",
            value: '{"backend":"add_sub","version_policy":{"latest":{"num_versions":2}}}',
          },
        },
      },
    });
    await client.repositoryModelLoad({ modelName: "sub" });
    for (const version of ["1", "2"]) {
      const add = await run(client, "add", version);
      expect(add.out).toEqual([6, 8, 10, 12]);
      // Imported as Triton imports a backend's model.py: `model`, from the backend's folder.
      expect(add.where).toEqual({
        module: "model",
        file: join(BACKENDS, "add_sub", "model.py"),
        model_dir: join(repo, "add", version),
        model_name: "add",
      });
    }
    expect((await run(client, "sub")).out).toEqual([4, 4, 4, 4]);
    // The backend's auto_complete_config filled the config in.
    const config = (await client.modelConfig({ name: "sub" })).config;
    expect(config?.backend).toBe("add_sub");
    expect(config?.input.map((i) => i.name)).toEqual(["INPUT0", "INPUT1"]);
    expect(config?.output.map((o) => o.name)).toEqual(["OUTPUT", "WHERE"]);
  });

  it("lets Galley's own backends win, and fails a backend found nowhere with Triton's words", async () => {
    const repo = tempRepository();
    // backend: "python" is Galley's own, though the directory has a python/model.py (which raises).
    copyPythonModels(repo, ["identity"]);
    mkdirSync(join(repo, "nowhere", "1"), { recursive: true });
    writeFileSync(join(repo, "nowhere", "config.pbtxt"), 'backend: "nowhere"\n');
    addSubModel(repo, "add", "add");
    const { client } = await startServer({
      modelRepositories: [repo],
      backendDirectory: BACKENDS,
      pythonExecutable: python,
      controlMode: "explicit",
    });
    await client.repositoryModelLoad({ modelName: "identity" });
    expect((await client.modelReady({ name: "identity" })).ready).toBe(true);
    const missing = (backend: string) =>
      `unable to find backend library for backend '${backend}', try specifying runtime on the model configuration.`;
    expect((await grpcFailure(client.repositoryModelLoad({ modelName: "nowhere" }))).rawMessage).toContain(
      missing("nowhere"),
    );
    // Without --backend-directory there are no Python-based backends.
    const plain = await startServer({ modelRepositories: [repo], pythonExecutable: python, controlMode: "explicit" });
    expect((await grpcFailure(plain.client.repositoryModelLoad({ modelName: "add" }))).rawMessage).toContain(
      missing("add_sub"),
    );
  });

  it("takes --backend-directory on the command line, and says a Python-based backend takes the python backend's settings", () => {
    const options = parseServeArgs(["--model-repository", "/m", "--backend-directory", BACKENDS]);
    expect(options !== "help" && options.server.backendDirectory).toBe(BACKENDS);
    const config = parseBackendConfig(["add_sub,shm-default-byte-size=1048576", "other,x=1"], {
      backendDirectory: BACKENDS,
    });
    expect(config.warnings[0]).toContain("'add_sub' is a Python-based backend");
    expect(config.warnings[1]).toContain("the other backend here has no such setting");
  });
});

/** POST exactly `path` (no normalisation) with a JSON body. */
function postRaw(url: string, path: string, body: unknown): Promise<{ status: number; text: string }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request({ host: hostname, port, method: "POST", path }, (res) => {
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

describe("stub names (Triton's Python backend)", () => {
  it("refuses a model whose name has a shell metacharacter before its model.py runs, over HTTP and gRPC", async () => {
    const marker = mkdtempSync(join(tmpdir(), "galley-stub-name-"));
    try {
      const repo = tempRepository();
      const s = await startServer({
        modelRepositories: [repo],
        pythonExecutable: python,
        controlMode: "explicit",
        http: true,
      });
      // The model writes a file when imported: it must never be.
      const model = (name: string) =>
        Buffer.from(
          `open(${JSON.stringify(join(marker, "ran"))}, "a").write(${JSON.stringify(name)})\n` +
            "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n",
        ).toString("base64");
      const body = (name: string) => ({
        parameters: {
          config: JSON.stringify({
            name,
            backend: "python",
            max_batch_size: 4,
            input: [{ name: "INPUT0", data_type: "TYPE_FP32", dims: [-1] }],
            output: [{ name: "OUTPUT0", data_type: "TYPE_FP32", dims: [-1] }],
          }),
          "file:/1/model.py": model(name),
        },
      });
      const refused = "Invalid stub name: contains invalid characters";
      for (const name of [
        "model;test",
        "model|test",
        "model&test",
        "model$test",
        "model`test`",
        "model<test>",
        "model(test)",
        "model\\test",
        'model"test"',
        "model'test'",
        "model*test",
        "model~test",
        "model!test",
      ]) {
        const reply = await postRaw(s.httpUrl ?? "", `/v2/repository/models/${name}/load`, body(name));
        expect(reply.status, name).not.toBe(200);
        expect(reply.text, name).toContain(refused);
        expect((await s.client.modelReady({ name })).ready).toBe(false);
      }
      // gRPC takes the names a URL cannot carry as they are (`#`, `?`, `[`).
      for (const name of ["model#test", "model?test", "model[test]"]) {
        const { config, ...files } = body(name).parameters;
        const failure = await grpcFailure(
          s.client.repositoryModelLoad({
            modelName: name,
            parameters: {
              config: { parameterChoice: { case: "stringParam", value: config } },
              ...Object.fromEntries(
                Object.entries(files).map(([k, v]) => [
                  k,
                  { parameterChoice: { case: "bytesParam", value: Buffer.from(v, "base64") } },
                ]),
              ),
            },
          }),
        );
        expect(failure.rawMessage, name).toContain(refused);
      }
      // With auto-complete off the instance's stub name is refused: still before model.py runs.
      const strict = await startServer({
        modelRepositories: [repo],
        pythonExecutable: python,
        controlMode: "explicit",
        autoComplete: false,
        http: true,
      });
      const reply = await postRaw(strict.httpUrl ?? "", "/v2/repository/models/model!x/load", body("model!x"));
      expect(reply.text).toContain(refused);
      expect(existsSync(join(marker, "ran"))).toBe(false);
      // A valid name loads.
      const ok = await postRaw(
        s.httpUrl ?? "",
        "/v2/repository/models/model-with_hyphens1/load",
        body("model-with_hyphens1"),
      );
      expect([ok.status, ok.text]).toEqual([200, ""]);
    } finally {
      rmSync(marker, { recursive: true, force: true });
    }
  });
});
