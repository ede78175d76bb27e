// The sequence batcher over the real server, with Triton's simple_sequence and
// simple_dyna_sequence and the values of Triton's sequence client examples.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ConnectError } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../src/index.js";
import {
  cleanup,
  copyModel,
  type InferenceClient,
  int32Bytes,
  readInt32,
  sequenceParameters,
  startServer,
  tempRepository,
  waitFor,
} from "./support/harness.js";

afterEach(cleanup);

const VALUES = [0, 11, 7, 5, 3, 2, 0, 1];

type Id = bigint | string;

async function send(
  client: InferenceClient,
  model: string,
  id: Id,
  value: number,
  start: boolean,
  end: boolean,
  batch = 1,
) {
  const response = await client.modelInfer({
    modelName: model,
    id: `${String(id)}_${value}`,
    parameters: sequenceParameters(id, start, end),
    inputs: [{ name: "INPUT", datatype: "INT32", shape: [BigInt(batch), 1n] }],
    rawInputContents: [int32Bytes(new Array(batch).fill(value))],
  });
  return { id: response.id, value: readInt32(response.rawOutputContents[0])[0] };
}

/** One whole sequence, in order; returns the outputs. */
async function sequence(client: InferenceClient, model: string, id: Id): Promise<number[]> {
  const out: number[] = [];
  for (const [i, value] of VALUES.entries()) {
    out.push((await send(client, model, id, value, i === 0, i === VALUES.length - 1)).value ?? Number.NaN);
  }
  return out;
}

describe("sequence batcher", () => {
  it("runs simple_sequence: OUTPUT = (INPUT + START) × READY, request ids echoed", async () => {
    const { client } = await startServer();
    const [a, b] = await Promise.all([
      sequence(client, "simple_sequence", 1000n),
      sequence(client, "simple_sequence", 1001n),
    ]);
    const expected = VALUES.map((v, i) => v + (i === 0 ? 1 : 0));
    expect(a).toEqual(expected);
    expect(b).toEqual(expected);
    expect((await send(client, "simple_sequence", 7n, 5, true, true)).id).toBe("7_5");
  });

  it("runs simple_dyna_sequence: END adds the correlation id, for several interleaved sequences", async () => {
    const { client } = await startServer();
    const ids = [1000n, 1001n, 1002n, 123456789n];
    const results = await Promise.all(ids.map((id) => sequence(client, "simple_dyna_sequence", id)));
    results.forEach((result, k) => {
      const id = Number(ids[k]);
      expect(result).toEqual(VALUES.map((v, i) => v + (i === 0 ? 1 : 0) + (i === VALUES.length - 1 ? id : 0)));
    });
    const stats = (await client.modelStatistics({ name: "simple_dyna_sequence" })).modelStats[0];
    expect(stats?.inferenceCount).toBe(BigInt(ids.length * VALUES.length));
  });

  it("answers Triton's errors: no correlation id, no START on a new sequence, batch above 1, wrong id type", async () => {
    const { client } = await startServer();
    const error = async (p: Promise<unknown>) => ((await p.catch((e: unknown) => e)) as ConnectError).rawMessage;
    await expect(
      error(
        client.modelInfer({
          modelName: "simple_sequence",
          inputs: [{ name: "INPUT", datatype: "INT32", shape: [1n, 1n] }],
          rawInputContents: [int32Bytes([1])],
        }),
      ),
    ).resolves.toBe("inference request to model 'simple_sequence' must specify a non-zero or non-empty correlation ID");
    await expect(error(send(client, "simple_sequence", 55n, 1, false, false))).resolves.toBe(
      "inference request for sequence 55 to model 'simple_sequence' must specify the START flag on the first request of the sequence",
    );
    await expect(error(send(client, "simple_sequence", 56n, 1, true, false, 2))).resolves.toBe(
      "inference request to model 'simple_sequence' must specify batch-size 1 due to requirements of sequence batcher",
    );
    await expect(error(send(client, "simple_dyna_sequence", "uuid-1", 1, true, true))).resolves.toBe(
      "sequence batching model 'simple_dyna_sequence' expects a integer correlation ID",
    );
  });

  it("releases a sequence that idles past max_sequence_idle_microseconds", async () => {
    const repo = tempRepository();
    copyModel("simple_sequence", repo);
    const config = join(repo, "simple_sequence", "config.pbtxt");
    writeFileSync(
      config,
      readFileSync(config, "utf8").replace(
        "sequence_batching {",
        "sequence_batching {\n  max_sequence_idle_microseconds: 500000",
      ),
    );
    const lines: string[] = [];
    const log = createLogger({ verboseLevel: 1, write: (line) => lines.push(line) });
    const { client } = await startServer({ modelRepositories: [repo], log });
    expect((await send(client, "simple_sequence", 9n, 1, true, false)).value).toBe(2);
    expect((await send(client, "simple_sequence", 9n, 1, false, false)).value).toBe(1);
    // A sequence that keeps sending is not released meanwhile.
    await send(client, "simple_sequence", 10n, 1, true, false);
    for (let i = 0; i < 5; i++) expect((await send(client, "simple_sequence", 10n, 1, false, i === 4)).value).toBe(1);
    // Once released, the id is unknown again and a request without START is refused.
    await waitFor(() => lines.some((l) => l.includes("sequence 9 released after idling")), { what: "the release" });
    const late = await send(client, "simple_sequence", 9n, 1, false, false).catch((e: unknown) => e);
    expect((late as ConnectError).rawMessage).toMatch(/sequence 9 .* must specify the START flag/);
    expect(
      lines.filter((l) => l.includes("released after idling")).map((l) => l.replace(/.*sequence /, "").trim()),
    ).toEqual(["9 released after idling"]);
  });
});
