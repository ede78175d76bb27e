// Child entry for memory.ts: Galley as `npm start` runs it (every model of
// examples/model_repository, HTTP only, no logging). Reports its HTTP port and pid.
import { createLogger, createServer } from "@galley/server";
import { serveJobs } from "./ipc.js";
import { REPOSITORY } from "./simple.js";

const server = createServer({
  modelRepositories: [REPOSITORY],
  http: { host: "127.0.0.1", port: 0 },
  grpc: false,
  metrics: false,
  log: createLogger({ info: false }),
});
const { http, failedModels } = await server.listen();
if (failedModels.length > 0) throw new Error(`galley failed to load ${failedModels.join(", ")}`);
serveJobs({ http: http?.port, pid: process.pid }, async () => process.memoryUsage().rss, server.close);
