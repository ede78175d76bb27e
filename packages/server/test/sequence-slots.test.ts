// Sequence slots, the backlog, the oldest strategy's queue delay and cancellation, observed
// through a scripted model that logs each execution (correlation id and flags, per batch).
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ConnectError } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import {
  cleanup,
  expectGrpcError,
  type InferenceClient,
  recordingLog,
  sequenceParameters,
  startServer,
  tempRepository,
  waitFor,
} from "./support/harness.js";

afterEach(cleanup);

/**
 * A sequence model that logs `id:flags` per request (with `ready`: `id:flags:READY:IN`), one line
 * per batch, and takes `delayMs` per execute.
 */
function loggingModel(scheduling: string, delayMs = 0, ready = false): { repo: string; log: string } {
  const repo = tempRepository();
  const log = join(repo, "executions.txt");
  mkdirSync(join(repo, "seq", "1"), { recursive: true });
  writeFileSync(
    join(repo, "seq", "config.pbtxt"),
    `name: "seq"
backend: "js"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000 ${scheduling}
  ${ready ? 'control_input [ { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] } ]' : ""}
}
`,
  );
  writeFileSync(
    join(repo, "seq", "1", "model.mjs"),
    `import { appendFileSync } from "node:fs";
     export default class {
       async execute(requests) {
         const line = (r) => r.correlationId + ":" + r.flags + (${ready} ? ":" + r.input("READY").typed()[0] + ":" + r.input("IN").typed()[0] : "");
         appendFileSync(${JSON.stringify(log)}, requests.map(line).join(" ") + "\\n");
         await new Promise((resolve) => setTimeout(resolve, ${delayMs}));
         return requests.map((r) => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1, 1], data: r.input("IN").typed() }] }));
       }
     }`,
  );
  return { repo, log };
}

function send(client: InferenceClient, id: number, start: boolean, end: boolean, signal?: AbortSignal) {
  return client.modelInfer(
    {
      modelName: "seq",
      id: `${id}`,
      parameters: sequenceParameters(BigInt(id), start, end),
      inputs: [{ name: "IN", datatype: "INT32", shape: [1n, 1n] }],
      rawInputContents: [new Uint8Array(Int32Array.of(id).buffer)],
    },
    signal ? { signal } : {},
  );
}

const lines = (log: string) => (existsSync(log) ? readFileSync(log, "utf8").split("\n").filter(Boolean) : []);

describe("sequence slots", () => {
  it("holds a new sequence in the backlog while every slot is taken, and gives it the position the first one frees", async () => {
    // direct, max_batch_size 4: one instance has 4 slots.
    const { repo, log } = loggingModel("direct { }");
    const { client, server } = await startServer({ modelRepositories: [repo] });
    for (const id of [1, 2, 3, 4]) await send(client, id, true, false);
    const fifth = send(client, 5, true, false);
    // The fifth sequence waits: nothing of it has executed, and it is counted as pending.
    await waitFor(() => server.core.models.resolve("seq", "").stats.pending === 1);
    expect(lines(log).join(" ")).not.toContain("5:");
    await send(client, 2, false, true);
    await fifth;
    // Sequence 5 took sequence 2's position, 1; position 0 (sequence 1, idle) gets a null request.
    expect(lines(log).at(-1)).toBe("0:0 5:1");
  });

  it("direct: batches requests of different sequences on one instance, each at its position, null requests below", async () => {
    const { repo, log } = loggingModel("direct { }", 300);
    const { client } = await startServer({ modelRepositories: [repo] });
    const first = send(client, 1, true, false);
    await waitFor(() => lines(log).length === 1);
    // While the instance is busy, three more sequences start: they run together next.
    await Promise.all([first, send(client, 2, true, true), send(client, 3, true, true), send(client, 4, true, true)]);
    // Positions 0–3; sequence 1 (position 0) has nothing queued, so a null request (id 0, no flags) holds its place.
    expect(lines(log)).toEqual(["1:1", "0:0 2:3 3:3 4:3"]);
  });

  it("oldest: waits up to max_queue_delay_microseconds for a batch to fill, and sends a preferred size at once", async () => {
    const { repo, log } = loggingModel(
      "oldest { max_candidate_sequences: 8 preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 2000000 }",
    );
    const verbose = recordingLog();
    verbose.log.update({ log_verbose_level: 1 });
    const { client } = await startServer({ modelRepositories: [repo], log: verbose.log });
    // Three sequences reach the preferred size: one execution, sent for that reason, not the 2 s delay.
    await Promise.all([send(client, 1, true, true), send(client, 2, true, true), send(client, 3, true, true)]);
    expect(lines(log)).toHaveLength(1);
    expect(lines(log)[0]?.split(" ").sort()).toEqual(["1:3", "2:3", "3:3"]);
    expect(
      verbose.lines.filter((l) => l.includes("sequence batch of size")).map((l) => l.split(": ").at(-1)?.trim()),
    ).toEqual(["preferred size reached"]);
  });

  it("direct: a sequence keeps its position from START to END; empty positions get READY 0 and zeros", async () => {
    const { repo, log } = loggingModel("direct { }", 0, true);
    const verbose = recordingLog();
    verbose.log.update({ log_verbose_level: 1 });
    const { client } = await startServer({ modelRepositories: [repo], log: verbose.log });
    // Sequences 1, 2, 3 take positions 0, 1, 2, one request at a time.
    for (const id of [1, 2, 3]) await send(client, id, true, false);
    expect(lines(log)).toEqual(["1:1:1:1", "0:0:0:0 2:1:1:2", "0:0:0:0 0:0:0:0 3:1:1:3"]);
    // Sequence 2 ends; sequence 3 stays at position 2, and a new sequence 4 takes position 1.
    await send(client, 2, false, true);
    await send(client, 4, true, false);
    await send(client, 3, false, false);
    expect(lines(log).slice(3)).toEqual(["0:0:0:0 2:2:1:2", "0:0:0:0 4:1:1:4", "0:0:0:0 0:0:0:0 3:0:1:3"]);
    // Sequence 1 alone needs no padding: it is at position 0.
    await send(client, 1, false, true);
    expect(lines(log).at(-1)).toBe("1:2:1:1");
    // One verbose line per batch, with its size, the null requests and why it was sent.
    const batches = verbose.lines.filter((l) => l.includes("sequence batch of size"));
    expect(batches).toHaveLength(7);
    expect(batches[2]).toContain(
      "model 'seq': sequence batch of size 3 (1 request(s), 2 null) sent to seq_0_0: no delay",
    );
  });

  it("direct: waits up to max_queue_delay_microseconds until minimum_slot_utilization of the positions have a request", async () => {
    const { repo, log } = loggingModel(
      "direct { max_queue_delay_microseconds: 600000 minimum_slot_utilization: 0.5 }",
      0,
      true,
    );
    const verbose = recordingLog();
    verbose.log.update({ log_verbose_level: 1 });
    const { client, server } = await startServer({ modelRepositories: [repo], log: verbose.log });
    const stats = () => server.core.models.resolve("seq", "").stats;
    // One request of four positions (0.25) waits for the delay, then runs alone.
    const started = Date.now();
    await send(client, 1, true, false);
    expect(Date.now() - started).toBeGreaterThanOrEqual(600);
    expect(lines(log)).toEqual(["1:1:1:1"]);
    // Two requests (0.5) run together at once: the second arrives while the first waits.
    const first = send(client, 1, false, false);
    await waitFor(() => stats().pending === 1);
    await Promise.all([first, send(client, 2, true, false)]);
    expect(lines(log).at(-1)).toBe("1:0:1:1 2:1:1:2");
    expect(
      verbose.lines
        .filter((l) => l.includes("sequence batch of size"))
        .map((l) => l.split("sent to seq_0_0: ")[1]?.trim()),
    ).toEqual(["delay expired", "slot utilization reached"]);
  });

  it("cancelling a queued request cancels its sequence's queued requests and ends the sequence", async () => {
    const { repo, log } = loggingModel("direct { }", 400);
    const { client, server } = await startServer({ modelRepositories: [repo] });
    const running = send(client, 7, true, false);
    await waitFor(() => lines(log).length === 1);
    const abort = new AbortController();
    const second = send(client, 7, false, false, abort.signal).catch((e: unknown) => e);
    const third = send(client, 7, false, true).catch((e: unknown) => e);
    // Both wait behind the running request before the client cancels the first of them.
    await waitFor(() => server.core.models.resolve("seq", "").stats.pending === 2);
    abort.abort();
    await running;
    expect(await second).toBeInstanceOf(ConnectError);
    const thirdError = (await third) as ConnectError;
    expect(thirdError.code).toBe(1);
    expect(thirdError.rawMessage).toBe("[request id: 7] request cancelled");
    // Neither executed, and the sequence is gone: continuing it needs a new START.
    expect(lines(log)).toEqual(["7:1"]);
    await expectGrpcError(
      send(client, 7, false, true),
      3,
      "inference request for sequence 7 to model 'seq' must specify the START flag on the first request of the sequence",
    );
  });
});
