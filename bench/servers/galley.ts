// Galley itself, as `galley serve` would run it: REST and gRPC frontends, no metrics endpoint,
// loading the one model of the workload (`simple`, or the identity from its temporary repository).
import { createLogger, createServer } from "@galley/server";
import { type Workload, workloadOf } from "../lib/workload.js";
import type { BenchServer } from "./server.js";

export async function startGalley(workload: Workload = workloadOf()): Promise<BenchServer> {
  const server = createServer({
    modelRepositories: [workload.repository],
    controlMode: "explicit",
    loadModels: [workload.model],
    http: { host: "127.0.0.1", port: 0 },
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: createLogger({ info: false }),
  });
  const { http, grpc, failedModels } = await server.listen();
  if (failedModels.includes(workload.model)) throw new Error(`galley failed to load '${workload.model}'`);
  return { ports: { grpc: grpc?.port, http: http?.port }, close: () => server.close() };
}
