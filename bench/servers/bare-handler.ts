// The floor for gRPC: a connect-node handler for ModelInfer on an h2c server that answers with
// outputs of the same names, shapes and sizes as the workload's model (`simple`'s two [1,16] INT32
// tensors, or the identity's FP32 tensor as large as its input), without validating anything or
// running a model: the raw_output_contents are zeros, allocated per request.
import { createServer } from "node:http2";
import type { AddressInfo } from "node:net";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { GRPCInferenceService } from "@galley/proto";
import { type Workload, workloadOf } from "../lib/workload.js";
import type { BenchServer } from "./server.js";

export async function startBareHandler(workload: Workload = workloadOf()): Promise<BenchServer> {
  const outputs = workload.outputs.map(({ name, datatype, shape, expected }) => ({
    name,
    datatype,
    shape: shape.map(BigInt),
    bytes: expected.byteLength,
  }));
  const handler = connectNodeAdapter({
    routes: (router) => {
      router.service(GRPCInferenceService, {
        modelInfer: (req) => ({
          modelName: req.modelName,
          modelVersion: "1",
          id: req.id,
          outputs: outputs.map(({ name, datatype, shape }) => ({ name, datatype, shape })),
          rawOutputContents: outputs.map(({ bytes }) => new Uint8Array(bytes)),
        }),
      });
    },
  });
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    ports: { grpc: (server.address() as AddressInfo).port },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
