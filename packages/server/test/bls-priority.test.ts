// Priority end to end (issue 52 item 4): a request's `priority` parameter reaches the models its
// pipeline runs — ensemble steps, and BLS calls from JavaScript and Python models that give none
// of their own — so the callees' dynamic batchers queue the pipeline's steps at the client's level.
// `echo` answers the priority it was asked at; a real server (port 0), real worker threads and
// a real Python stub, gRPC clients.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { InferParameterSchema } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { pythonWithNumpy } from "./python-harness.js";
import { cleanup, int32Bytes, readInt32, startServer, tempRepository } from "./support/harness.js";

afterEach(cleanup);
const python = pythonWithNumpy();

const IO = `
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]`;

function model(repo: string, name: string, config: string, file?: [string, string]): void {
  mkdirSync(join(repo, name, "1"), { recursive: true });
  writeFileSync(join(repo, name, "config.pbtxt"), `name: "${name}"\n${config}\n`);
  if (file) writeFileSync(join(repo, name, "1", file[0]), file[1]);
}

/** OUT: the `priority` this request came with (0 for none); two levels, so the batcher takes it. */
const ECHO = `export default class {
  execute(requests) {
    return requests.map((request) => ({
      outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: new Int32Array([Number(request.parameters.priority ?? 0)]) }],
    }));
  }
}`;

/** Calls echo; IN > 0 is a priority of the call's own. */
const CALLER_JS = `export default class {
  async execute(requests, context) {
    return Promise.all(requests.map(async (request) => {
      const own = request.input("IN").typed()[0];
      const reply = await context.infer({
        model: "echo",
        inputs: [{ name: "IN", datatype: "INT32", shape: [1], data: new Int32Array([0]) }],
        outputs: ["OUT"],
        direct: true,
        ...(own > 0 ? { priority: own } : {}),
      });
      return { outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: new Int32Array(reply.output("OUT").typed()) }] };
    }));
  }
}`;

const CALLER_PY = `import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="echo",
                inputs=[pb_utils.Tensor("IN", np.array([0], dtype=np.int32))],
                requested_output_names=["OUT"],
            )
            reply = call.exec()
            if reply.has_error():
                raise pb_utils.TritonModelException(reply.error().message())
            out = pb_utils.get_output_tensor_by_name(reply, "OUT").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out.astype(np.int32))]))
        return responses
`;

const ENSEMBLE = `platform: "ensemble"
max_batch_size: 0${IO}
ensemble_scheduling { step [ { model_name: "echo" model_version: -1 input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "OUT" } } ] }`;

describe("priority through pipelines", () => {
  it("reaches ensemble steps and BLS calls from JavaScript and Python models; a call's own priority wins", async () => {
    const repo = tempRepository();
    model(
      repo,
      "echo",
      `backend: "js"\nmax_batch_size: 0${IO}\ndynamic_batching { priority_levels: 3 default_priority_level: 2 }`,
      ["model.mjs", ECHO],
    );
    model(repo, "caller_js", `backend: "js"\nmax_batch_size: 0${IO}`, ["model.mjs", CALLER_JS]);
    model(repo, "caller_py", `backend: "python"\nmax_batch_size: 0${IO}`, ["model.py", CALLER_PY]);
    model(repo, "pipeline", ENSEMBLE);
    const { client, failedModels } = await startServer({ modelRepositories: [repo], pythonExecutable: python });
    expect(failedModels).toEqual([]);
    const ask = async (name: string, priority: number | undefined, own = 0) => {
      const reply = await client.modelInfer({
        modelName: name,
        inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }],
        rawInputContents: [int32Bytes([own])],
        parameters:
          priority === undefined
            ? {}
            : {
                priority: create(InferParameterSchema, {
                  parameterChoice: { case: "uint64Param", value: BigInt(priority) },
                }),
              },
      });
      return readInt32(reply.rawOutputContents[0])[0];
    };
    for (const name of ["pipeline", "caller_js", "caller_py"]) {
      expect(await ask(name, 1), name).toBe(1);
      expect(await ask(name, 3), name).toBe(3);
      expect(await ask(name, undefined), name).toBe(0);
    }
    // Twice each: the JavaScript caller's second call could take a direct route past the scheduler.
    expect(await ask("caller_js", 1, 3)).toBe(3);
    expect(await ask("caller_js", 1, 3)).toBe(3);
    expect(await ask("caller_js", 1)).toBe(1);
  }, 60_000);
});
