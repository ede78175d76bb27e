// Child entry for ab-server.ts: Galley serving `simple` (REST and gRPC, as servers/galley.ts),
// from the built server package at argv[2] (`current` for this checkout's @galley/server), so
// that two builds (before and after a change) can be measured in one run. Reports ports and pid.
import { pathToFileURL } from "node:url";
import { serveJobs } from "./ipc.js";
import { MODEL, REPOSITORY } from "./simple.js";

type ServerModule = typeof import("@galley/server");
const build = process.argv[2] ?? "current";
const galley: ServerModule =
  build === "current"
    ? await import("@galley/server")
    : ((await import(pathToFileURL(`${build}/packages/server/dist/index.js`).href)) as ServerModule);
const server = galley.createServer({
  modelRepositories: [REPOSITORY],
  controlMode: "explicit",
  loadModels: [MODEL],
  http: { host: "127.0.0.1", port: 0 },
  grpc: { host: "127.0.0.1", port: 0 },
  metrics: false,
  log: galley.createLogger({ info: false }),
});
const { http, grpc, failedModels } = await server.listen();
if (failedModels.length > 0) throw new Error(`galley (${build}) failed to load ${failedModels.join(", ")}`);
serveJobs({ http: http?.port, grpc: grpc?.port, pid: process.pid }, async () => null, server.close);
