// Child entry for memory.ts: Galley as `npm start` runs it (every model of
// examples/model_repository, HTTP only, no logging). Reports its HTTP port and pid.
import { getHeapSpaceStatistics, getHeapStatistics } from "node:v8";
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
/** The only job: where the process's memory is, in bytes (the V8 heap's committed spaces, memory outside it). */
serveJobs(
  { http: http?.port, pid: process.pid },
  async (): Promise<HeapReading> => {
    const spaces = getHeapSpaceStatistics();
    const committed = (name: string) => spaces.find((s) => s.space_name === name)?.physical_space_size ?? 0;
    return {
      heap: getHeapStatistics().total_physical_size,
      young: committed("new_space") + committed("new_large_object_space"),
      external: process.memoryUsage().external,
    };
  },
  server.close,
);

/** What memory.ts prints beside RSS after each step. */
export interface HeapReading {
  /** The V8 heap's resident size, every space. */
  heap: number;
  /** Of that, the young generation's. */
  young: number;
  /** Memory V8 does not hold but counts (array buffers, native objects). */
  external: number;
}
