// Child entry for ab-server.ts: Galley serving `simple` (REST and gRPC, as servers/galley.ts),
// from the built server package at argv[2] (`current` for this checkout's @galley/server), so
// that two builds (before and after a change) can be measured in one run. Reports ports and pid.
import { importGalley, simpleServer } from "./galley-build.js";
import { serveJobs } from "./ipc.js";

const build = process.argv[2] ?? "current";
const server = simpleServer(await importGalley(build));
const { http, grpc, failedModels } = await server.listen();
if (failedModels.length > 0) throw new Error(`galley (${build}) failed to load ${failedModels.join(", ")}`);
serveJobs({ http: http?.port, grpc: grpc?.port, pid: process.pid }, async () => null, server.close);
