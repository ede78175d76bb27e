// Child entry: start one server (argv[2]: galley | bare | hand-written), report its ports, serve
// until told to stop. Jobs ask for the process's CPU time.
import { startBareHandler } from "../servers/bare-handler.js";
import { startGalley } from "../servers/galley.js";
import { startHandWritten } from "../servers/hand-written.js";
import type { BenchServer } from "../servers/server.js";
import { serveJobs } from "./ipc.js";

const starters: Record<string, () => Promise<BenchServer>> = {
  galley: startGalley,
  bare: startBareHandler,
  "hand-written": startHandWritten,
};

const start = starters[process.argv[2] ?? ""];
if (!start) throw new Error(`unknown server '${process.argv[2]}'`);
const server = await start();
/** The only job: this process's CPU time so far (all threads), in microseconds. */
const cpu = () => {
  const { user, system } = process.cpuUsage();
  return user + system;
};
serveJobs(server.ports, async () => cpu(), server.close);
