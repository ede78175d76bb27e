// `--metrics-config histogram_latencies=true` (PROTOCOL.md §7.3): Triton's
// `nv_inference_first_response_histogram_ms` per model after real requests, scraped over HTTP —
// cumulative buckets, `_count` one per request, `_sum` in whole milliseconds, Triton's default
// buckets and a model's own through `model_metrics`, the first response of a decoupled model
// (not its last), and nothing of it when the setting is off.
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import type { ModelInferRequest, ModelInferRequestSchema } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import {
  cleanup,
  copyModel,
  expectGrpcError,
  range,
  simpleRequest,
  startServer,
  tempRepository,
} from "./support/harness.js";
import { findSamples, type Scrape, scrape } from "./support/metrics.js";

afterEach(cleanup);

const FAMILY = "nv_inference_first_response_histogram_ms";

/** One model version's histogram: its buckets by `le`, sum and count; checks the buckets' shape. */
function histogram(s: Scrape, labels: Record<string, string>) {
  const buckets = findSamples(s, `${FAMILY}_bucket`, labels).map((b) => [b.labels.le as string, b.value] as const);
  const [sum] = findSamples(s, `${FAMILY}_sum`, labels);
  const [count] = findSamples(s, `${FAMILY}_count`, labels);
  if (!sum || !count) throw new Error(`no ${FAMILY} for ${JSON.stringify(labels)}:\n${s.text}`);
  // Cumulative: each bucket holds at least the one before it, and +Inf holds them all.
  for (let i = 1; i < buckets.length; i++) expect(buckets[i]?.[1]).toBeGreaterThanOrEqual(buckets[i - 1]?.[1] ?? 0);
  expect(buckets.at(-1)).toEqual(["+Inf", count.value]);
  return { le: buckets.map(([le]) => le), counts: buckets.map(([, n]) => n), sum: sum.value, count: count.value };
}

type Init = MessageInitShape<typeof ModelInferRequestSchema>;
const int32 = (values: number[]) => new Uint8Array(Int32Array.from(values).buffer);
const uint32 = (values: number[]) => new Uint8Array(Uint32Array.from(values).buffer);
/** repeat_int32: one response per value, each after its delay in ms. */
function repeat(values: number[], delays: number[]): Init {
  return {
    modelName: "repeat_int32",
    inputs: [
      { name: "IN", datatype: "INT32", shape: [BigInt(values.length)] },
      { name: "DELAY", datatype: "UINT32", shape: [BigInt(delays.length)] },
      { name: "WAIT", datatype: "UINT32", shape: [1n] },
    ] as ModelInferRequest["inputs"],
    rawInputContents: [int32(values), uint32(delays), uint32([0])],
  };
}

describe(`${FAMILY} (histogram_latencies=true)`, () => {
  it("counts each request once in Triton's default buckets, with model and version labels", async () => {
    const { client, metricsUrl } = await startServer({
      metrics: { histogramLatencies: true },
      controlMode: "explicit",
      loadModels: ["simple"],
    });
    const before = histogram(await scrape(metricsUrl), { model: "simple", version: "1" });
    expect(before).toEqual({ le: ["100", "500", "2000", "5000", "+Inf"], counts: [0, 0, 0, 0, 0], sum: 0, count: 0 });

    const a = range(16);
    const started = performance.now();
    for (let i = 0; i < 7; i++) await client.modelInfer(simpleRequest(a, a));
    const elapsedMs = performance.now() - started;
    const s = await scrape(metricsUrl);
    expect(s.types.get(FAMILY)).toBe("histogram");
    expect(s.text).toContain(
      "# HELP nv_inference_first_response_histogram_ms Duration from request to first response in milliseconds",
    );
    const after = histogram(s, { model: "simple", version: "1" });
    expect(after.count).toBe(7);
    // Whole milliseconds, at most the time the seven requests took from the client's side.
    expect(Number.isInteger(after.sum)).toBe(true);
    expect(after.sum).toBeGreaterThanOrEqual(0);
    expect(after.sum).toBeLessThanOrEqual(elapsedMs);
    // Labels as Triton's: model and version, then le, nothing else.
    for (const sample of findSamples(s, `${FAMILY}_bucket`)) {
      expect(Object.keys(sample.labels)).toEqual(["model", "version", "le"]);
    }
    expect(s.text).toMatch(
      /^nv_inference_first_response_histogram_ms_bucket\{model="simple",version="1",le="100"\} \d+$/m,
    );
  });

  it("times a decoupled model's first response, not its last", async () => {
    const { client, metricsUrl } = await startServer({
      metrics: { histogramLatencies: true },
      controlMode: "explicit",
      loadModels: ["repeat_int32"],
    });
    const input = (async function* () {
      yield repeat([1, 2, 3], [150, 450, 450]);
    })();
    const responses = [];
    const started = performance.now();
    for await (const r of client.modelStreamInfer(input)) responses.push(r);
    const elapsedMs = performance.now() - started;
    expect(responses).toHaveLength(3);
    expect(elapsedMs).toBeGreaterThanOrEqual(1000);
    const h = histogram(await scrape(metricsUrl), { model: "repeat_int32", version: "1" });
    expect(h.count).toBe(1);
    // First response after ~150 ms: in the 500 ms bucket, not the 2000 ms one where the whole stream (≥1 s) would fall.
    expect(h.counts).toEqual([0, 1, 1, 1, 1]);
    expect(h.sum).toBeGreaterThanOrEqual(150);
    expect(h.sum).toBeLessThan(1000);
  });

  it("takes a model's buckets from model_metrics, as Triton's metric_control does", async () => {
    const repo = tempRepository();
    const model = copyModel("simple", repo);
    appendFileSync(
      join(model, "config.pbtxt"),
      `\nmodel_metrics { metric_control [ { metric_identifier { family: "${FAMILY}" } histogram_options { buckets: [ 0.5, 1, 10, 250 ] } } ] }\n`,
    );
    expect(readFileSync(join(model, "config.pbtxt"), "utf8")).toContain("histogram_options");
    const { client, metricsUrl } = await startServer({
      modelRepositories: [repo],
      metrics: { histogramLatencies: true },
    });
    const a = range(16);
    for (let i = 0; i < 3; i++) await client.modelInfer(simpleRequest(a, a));
    const h = histogram(await scrape(metricsUrl), { model: "simple", version: "1" });
    expect(h.le).toEqual(["0.5", "1", "10", "250", "+Inf"]);
    expect(h.count).toBe(3);
  });

  it("observes an error answered to an accepted request, not a request refused by validation", async () => {
    const repo = tempRepository();
    mkdirSync(join(repo, "fails", "1"), { recursive: true });
    writeFileSync(
      join(repo, "fails", "config.pbtxt"),
      `name: "fails"\nbackend: "js"\nmax_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n`,
    );
    writeFileSync(
      join(repo, "fails", "1", "model.mjs"),
      `export default class { execute() { throw new Error("the model fails"); } }\n`,
    );
    const { client, metricsUrl } = await startServer({
      modelRepositories: [repo],
      metrics: { histogramLatencies: true },
    });
    const request = (shape: bigint) => ({
      modelName: "fails",
      inputs: [{ name: "IN", datatype: "INT32", shape: [shape] }] as ModelInferRequest["inputs"],
      rawInputContents: [int32(range(Number(shape)))],
    });
    await expectGrpcError(client.modelInfer(request(1n)), Code.Internal);
    // Two elements where the config has one: refused before scheduling.
    await expectGrpcError(client.modelInfer(request(2n)), Code.InvalidArgument);
    const s = await scrape(metricsUrl);
    expect(histogram(s, { model: "fails", version: "1" }).count).toBe(1);
    expect(findSamples(s, "nv_inference_request_failure", { model: "fails" }).reduce((a, x) => a + x.value, 0)).toBe(2);
  });

  it("is absent when histogram_latencies is off, as by default", async () => {
    const { client, metricsUrl } = await startServer({
      metrics: true,
      controlMode: "explicit",
      loadModels: ["simple"],
    });
    const a = range(16);
    await client.modelInfer(simpleRequest(a, a));
    const s = await scrape(metricsUrl);
    expect(s.types.has(FAMILY)).toBe(false);
    expect(s.text).not.toContain(FAMILY);
  });
});
