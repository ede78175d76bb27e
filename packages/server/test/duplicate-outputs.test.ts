// A request that names the same output twice is refused, as Triton refuses it since
// triton-inference-server/core#493: INVALID_ARG with the request id, over REST and gRPC alike.
import { Code } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { postJson, SIXTEEN } from "./http-fixture.js";
import { cleanup, expectGrpcError, simpleRequest, startServer } from "./support/harness.js";

afterEach(cleanup);

const A = Array.from({ length: 16 }, (_, i) => i);

describe("a requested output named twice", () => {
  it("is 400 on REST, with Triton's text and the request id", async () => {
    const { httpUrl } = await startServer({ http: true });
    const port = Number(new URL(httpUrl ?? "").port);
    const body = (id?: string) => ({
      ...(id !== undefined ? { id } : {}),
      inputs: ["INPUT0", "INPUT1"].map((name) => ({ name, shape: [1, 16], datatype: "INT32", data: SIXTEEN })),
      outputs: [{ name: "OUTPUT0" }, { name: "OUTPUT1" }, { name: "OUTPUT0" }],
    });
    const unnamed = await postJson(port, "/v2/models/simple/infer", body());
    expect(unnamed.status).toBe(400);
    expect(unnamed.json()).toEqual({
      error: "[request id: <id_unknown>] output 'OUTPUT0' already exists in request",
    });
    const named = await postJson(port, "/v2/models/simple/infer", body("r7"));
    expect(named.status).toBe(400);
    expect(named.json()).toEqual({ error: "[request id: r7] output 'OUTPUT0' already exists in request" });
  });

  it("is INVALID_ARGUMENT on gRPC, before the output is checked against the model", async () => {
    const { client } = await startServer();
    const request = (outputs: string[]) => ({
      ...simpleRequest(A, A, { id: "g1" }),
      outputs: outputs.map((name) => ({ name })),
    });
    await expectGrpcError(
      client.modelInfer(request(["OUTPUT1", "OUTPUT1"])),
      Code.InvalidArgument,
      "[request id: g1] output 'OUTPUT1' already exists in request",
    );
    // A name the model does not have, twice: the repetition is what Triton sees first.
    await expectGrpcError(
      client.modelInfer(request(["NOPE", "NOPE"])),
      Code.InvalidArgument,
      "[request id: g1] output 'NOPE' already exists in request",
    );
    const once = await client.modelInfer(request(["OUTPUT1", "OUTPUT0"]));
    expect(once.outputs.map((o) => o.name)).toEqual(["OUTPUT1", "OUTPUT0"]);
  });
});
