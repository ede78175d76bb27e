// Child entry for server-cpu.ts: the load generator of a fixed amount of work. Each job sends
// exactly `requests` requests, `concurrency` at a time, back to back, through the same callers
// as the other benchmarks (lib/callers.ts), and answers with the wall time and the errors. One
// more target, `grpc-galley`, sends ModelInfer with @galley/client's `infer` (its lean path),
// whose own CPU cost is a fraction of the Connect client's, so that on 2 shared cores the client
// does not hold the server's request rate down.
import { createGrpcClient, tensor } from "@galley/client";
import { type Caller, createCaller, type Target } from "./callers.js";
import { serveJobs } from "./ipc.js";
import { INPUT0, INPUT1, MODEL, SHAPE } from "./simple.js";

export type CountLoadTarget = Target | { kind: "grpc-galley"; port: number };
export type CountLoadJob = { target: CountLoadTarget; concurrency: number; requests: number };
export interface CountLoadResult {
  wallMs: number;
  errors: number;
  firstError?: string;
}

const callers = new Map<string, Promise<Caller>>();

/** `simple` through @galley/client over gRPC; the outputs are returned as the other callers do. */
async function galleyClientCaller(port: number): Promise<Caller> {
  const client = createGrpcClient({ baseUrl: `http://127.0.0.1:${port}` });
  const request = { inputs: { INPUT0: tensor.int32(SHAPE, INPUT0), INPUT1: tensor.int32(SHAPE, INPUT1) } };
  return {
    async infer() {
      const result = await client.infer(MODEL, request);
      return [result.output("OUTPUT0").int32(), result.output("OUTPUT1").int32()];
    },
    close: async () => client.close(),
  };
}

serveJobs(
  null,
  async (job: CountLoadJob): Promise<CountLoadResult> => {
    const key = `${JSON.stringify(job.target)}/${job.concurrency}`;
    let pending = callers.get(key);
    if (!pending) {
      pending =
        job.target.kind === "grpc-galley"
          ? galleyClientCaller(job.target.port)
          : createCaller(job.target, job.concurrency);
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
