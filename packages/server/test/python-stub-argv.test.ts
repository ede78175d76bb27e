// The stub's sys.argv is Triton's: [""] (its stub embeds Python without arguments). NVIDIA's QA
// models (qa/python_models/bls and others) call `unittest.main("model", exit=False)` in
// `execute`, which reads sys.argv; with the stub's own arguments there it looked for tests named
// after them and failed (issue 48, L0_backend_python/bls).
import { afterEach, describe, expect, it } from "vitest";
import { copyPythonModels, pythonWithNumpy } from "./python-harness.js";
import { cleanup, startServer, tempRepository } from "./support/harness.js";

const python = pythonWithNumpy();

afterEach(cleanup);

describe("the Python stub's command line", () => {
  it("is [''] as in Triton's stub, so unittest.main() in execute runs the model's own tests", async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["unittest_main"]);
    const { client, failedModels } = await startServer({ modelRepositories: [repo], pythonExecutable: python });
    expect(failedModels).toEqual([]);
    const reply = await client.modelInfer({
      modelName: "unittest_main",
      inputs: [{ name: "INPUT0", datatype: "FP32", shape: [1n] }],
      rawInputContents: [new Uint8Array(4)],
    });
    expect([...(reply.rawOutputContents[0] ?? [])]).toEqual([1]);
  });
});
