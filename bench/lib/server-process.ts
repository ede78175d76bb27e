// Child entry: start one server (argv[2]: galley | bare | hand-written) for one model (argv[3]: a
// workload spec as JSON, absent for `simple`), report its ports, serve until told to stop. Jobs
// ask for the process's CPU time.
import { startBareHandler } from "../servers/bare-handler.js";
import { startGalley } from "../servers/galley.js";
import { startHandWritten } from "../servers/hand-written.js";
import type { BenchServer } from "../servers/server.js";
import { serveJobs } from "./ipc.js";
import { type ModelSpec, type Workload, workloadOf } from "./workload.js";

const starters: Record<string, (workload: Workload) => Promise<BenchServer>> = {
  galley: startGalley,
  bare: startBareHandler,
  "hand-written": (workload) => startHandWritten([workload]),
};

const start = starters[process.argv[2] ?? ""];
if (!start) throw new Error(`unknown server '${process.argv[2]}'`);
const spec = process.argv[3] ? (JSON.parse(process.argv[3]) as ModelSpec) : undefined;
const server = await start(workloadOf(spec));
/** The only job: this process's CPU time so far (all threads), in microseconds. */
const cpu = () => {
  const { user, system } = process.cpuUsage();
  return user + system;
};
serveJobs(server.ports, async () => cpu(), server.close);
