// Requests that used to make JavaScript's own error texts reach the client ("The number -2.5
// cannot be converted to a BigInt", "Offset is outside the bounds of the DataView"): each now gets
// an error from the table, with the status of a bad request and the field named.
import { create, toBinary } from "@bufbuild/protobuf";
import { ModelInferRequestSchema } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { grpcCall } from "./grpc-wire.js";
import { type HttpServer, postJson, SIXTEEN, startHttp } from "./http-fixture.js";
import { cleanup, startServer } from "./support/harness.js";

const servers: HttpServer[] = [];

afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
  await cleanup();
});

describe("generate with a reserved parameter of the wrong type", () => {
  it("answers 400 naming the parameter, on any model", async () => {
    const server = await startHttp({ controlMode: "explicit", loadModels: ["simple", "simple_identity"] });
    servers.push(server);
    const cases: [string, Record<string, unknown>, string][] = [
      ["simple_identity", { INPUT0: ["a"], sequence_id: -2.5 }, "invalid value type for 'sequence_id' parameter"],
      ["simple", { INPUT0: SIXTEEN, INPUT1: SIXTEEN, timeout: 2.5 }, "invalid value type for 'timeout' parameter"],
      [
        "simple",
        { INPUT0: SIXTEEN, INPUT1: SIXTEEN, sequence_start: 1 },
        "invalid value type for 'sequence_start' parameter",
      ],
      [
        "simple",
        { INPUT0: SIXTEEN, INPUT1: SIXTEEN, parameters: { priority: -1 } },
        "Converting keyword: 'parameters': invalid value type for 'priority' parameter",
      ],
    ];
    for (const [model, body, error] of cases) {
      const answer = await postJson(server.port, `/v2/models/${model}/generate`, body);
      expect({ model, status: answer.status, body: answer.json() }).toEqual({ model, status: 400, body: { error } });
    }
    // The same parameters with the right types are taken.
    const ok = await postJson(server.port, "/v2/models/simple_identity/generate", { INPUT0: ["a"], sequence_id: 7 });
    expect(ok.status).toBe(200);
  });
});

describe("a gRPC request that is not a valid protobuf encoding", () => {
  /** A ModelInferRequest whose last bytes, inside the packed `fp32_contents`, are missing. */
  function truncatedInfer(): Uint8Array {
    const message = create(ModelInferRequestSchema, {
      modelName: "simple",
      inputs: [{ name: "INPUT0", datatype: "FP32", shape: [4n], contents: { fp32Contents: [1, 2, 3, 4] } }],
    });
    const bytes = toBinary(ModelInferRequestSchema, message);
    return bytes.subarray(0, bytes.length - 6);
  }

  it("ModelInfer: INVALID_ARGUMENT naming the field where the bytes end", async () => {
    const { grpcUrl } = await startServer({ controlMode: "explicit", loadModels: ["simple"] });
    const reply = await grpcCall(grpcUrl, "/inference.GRPCInferenceService/ModelInfer", truncatedInfer());
    expect(reply).toMatchObject({
      status: 3,
      message: "unable to parse the ModelInferRequest message: field 'inputs.contents.fp32_contents' is cut short",
    });
  });

  it("ModelStreamInfer: INVALID_ARGUMENT without the decoder's text (the lean stream path decodes as the unary one)", async () => {
    const { grpcUrl } = await startServer({ controlMode: "explicit", loadModels: ["simple"] });
    const reply = await grpcCall(grpcUrl, "/inference.GRPCInferenceService/ModelStreamInfer", truncatedInfer());
    expect(reply).toMatchObject({
      status: 3,
      message: "unable to parse the ModelInferRequest message: field 'inputs.contents.fp32_contents' is cut short",
    });
  });
});
