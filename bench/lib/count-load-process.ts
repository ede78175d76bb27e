// Child entry for server-cpu.ts: the load generator of a fixed amount of work. Each job sends
// exactly `requests` requests, `concurrency` at a time, back to back, through the same callers
// as the other benchmarks (lib/callers.ts), and answers with the wall time and the errors.
import { type Caller, createCaller, type Target } from "./callers.js";
import { serveJobs } from "./ipc.js";

export type CountLoadJob = { target: Target; concurrency: number; requests: number };
export interface CountLoadResult {
  wallMs: number;
  errors: number;
  firstError?: string;
}

const callers = new Map<string, Promise<Caller>>();

serveJobs(
  null,
  async (job: CountLoadJob): Promise<CountLoadResult> => {
    const key = `${JSON.stringify(job.target)}/${job.concurrency}`;
    let pending = callers.get(key);
    if (!pending) {
      pending = createCaller(job.target, job.concurrency);
      callers.set(key, pending);
    }
    const caller = await pending;
    let issued = 0;
    let errors = 0;
    let firstError: string | undefined;
    const begin = performance.now();
    const loop = async () => {
      while (issued < job.requests) {
        issued++;
        try {
          await caller.infer();
        } catch (error) {
          errors++;
          firstError ??= String(error);
        }
      }
    };
    await Promise.all(Array.from({ length: job.concurrency }, loop));
    return { wallMs: performance.now() - begin, errors, ...(firstError ? { firstError } : {}) };
  },
  async () => {
    for (const caller of callers.values()) await (await caller).close();
  },
);
