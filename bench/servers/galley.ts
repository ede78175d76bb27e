// Galley itself, as `galley serve` would run it: REST and gRPC frontends, no metrics endpoint.
import { createLogger, createServer } from "@galley/server";
import { MODEL, REPOSITORY } from "../lib/simple.js";
import type { BenchServer } from "./server.js";

export async function startGalley(): Promise<BenchServer> {
  const server = createServer({
    modelRepositories: [REPOSITORY],
    controlMode: "explicit",
    loadModels: [MODEL],
    http: { host: "127.0.0.1", port: 0 },
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: createLogger({ info: false }),
  });
  const { http, grpc, failedModels } = await server.listen();
  if (failedModels.includes("simple")) throw new Error("galley failed to load 'simple'");
  return { ports: { grpc: grpc?.port, http: http?.port }, close: () => server.close() };
}
