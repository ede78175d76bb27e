// The floor for gRPC: a connect-node handler for ModelInfer on an h2c server that answers with
// outputs of the same sizes as `simple`'s, without validating anything or running a model.
import { createServer } from "node:http2";
import type { AddressInfo } from "node:net";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { GRPCInferenceService } from "@galley/proto";
import { TENSOR_BYTES } from "../lib/simple.js";
import type { BenchServer } from "./server.js";

export async function startBareHandler(): Promise<BenchServer> {
  const handler = connectNodeAdapter({
    routes: (router) => {
      router.service(GRPCInferenceService, {
        modelInfer: (req) => ({
          modelName: req.modelName,
          modelVersion: "1",
          id: req.id,
          outputs: ["OUTPUT0", "OUTPUT1"].map((name) => ({ name, datatype: "INT32", shape: [1n, 16n] })),
          rawOutputContents: [new Uint8Array(TENSOR_BYTES), new Uint8Array(TENSOR_BYTES)],
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
