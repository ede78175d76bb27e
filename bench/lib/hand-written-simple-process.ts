// Child entry for ab-server.ts: the hand-written server (servers/hand-written.ts) on `simple`.
import { startHandWritten } from "../servers/hand-written.js";
import { serveJobs } from "./ipc.js";
import { workloadOf } from "./workload.js";

const server = await startHandWritten([workloadOf()]);
serveJobs({ ...server.ports, pid: process.pid }, async () => null, server.close);
