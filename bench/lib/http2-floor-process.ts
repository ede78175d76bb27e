// Child entry for ab-server.ts --floors: one of servers/http2-floors.ts's responders (argv[2]:
// node-http2 | minimal), reporting its port as gRPC's and its pid.
import { minimalHttp2Floor, nodeHttp2Floor } from "../servers/http2-floors.js";
import { serveJobs } from "./ipc.js";

const kind = process.argv[2];
if (kind !== "node-http2" && kind !== "minimal") throw new Error(`unknown floor '${kind}'`);
const floor = await (kind === "minimal" ? minimalHttp2Floor() : nodeHttp2Floor());
serveJobs({ grpc: floor.port, pid: process.pid }, async () => null, floor.close);
