// Triton Python models (backend "python"): real stub processes, over real gRPC.
import { afterEach, describe, expect, it } from "vitest";
import { copyPythonModels, pythonWithNumpy, shmLeftovers, stubProcesses } from "./python-harness.js";
import { cleanup, fp32Bytes, readFp32, startServer, tempRepository } from "./support/harness.js";

const python = pythonWithNumpy();

afterEach(cleanup);

describe("a Python model", () => {
  it("answers Triton's add_sub", async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["add_sub"]);
    const { client, server, failedModels } = await startServer({ modelRepositories: [repo], pythonExecutable: python });
    expect(failedModels).toEqual([]);
    const reply = await client.modelInfer({
      modelName: "add_sub",
      inputs: [
        { name: "INPUT0", datatype: "FP32", shape: [4n] },
        { name: "INPUT1", datatype: "FP32", shape: [4n] },
      ],
      rawInputContents: [fp32Bytes([1, 2, 3, 4]), fp32Bytes([10, 20, 30, 40])],
    });
    expect(reply.outputs.map((o) => o.name)).toEqual(["OUTPUT0", "OUTPUT1"]);
    expect(readFp32(reply.rawOutputContents[0])).toEqual([11, 22, 33, 44]);
    expect(readFp32(reply.rawOutputContents[1])).toEqual([-9, -18, -27, -36]);
    expect(stubProcesses().filter((p) => p.ppid === process.pid)).toHaveLength(1);
    await server.close();
    expect(stubProcesses().filter((p) => p.ppid === process.pid)).toHaveLength(0);
    expect(shmLeftovers().filter((n) => n.includes(`_${process.pid}_`))).toEqual([]);
  });
});
