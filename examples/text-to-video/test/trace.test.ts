// A text-to-video request traced in mode opentelemetry: every step of the pipeline (each BLS call
// the text_to_video model makes, and the steps of the ensembles it calls) is a span under the
// request's, as docs/guides/deployment.md ("Traces") shows how to view it.
import type { GrpcClient } from "@galley/client";
import type { GalleyServer } from "@galley/server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type OtlpReceiver,
  type ReceivedSpan,
  startOtlpReceiver,
} from "../../../packages/server/test/support/otlp-receiver.ts";
import { generateVideo } from "../src/video.js";
import { startExampleServer } from "./example-server.js";

let server: GalleyServer;
let client: GrpcClient;
let receiver: OtlpReceiver;

beforeAll(async () => {
  receiver = await startOtlpReceiver();
  ({ server, client } = await startExampleServer({
    trace: {
      mode: "opentelemetry",
      level: 0x4,
      rate: 1,
      opentelemetry: {
        url: receiver.url,
        resource: [["service.name", "text-to-video"]],
        bspMaxQueueSize: 4096,
        bspScheduleDelay: 20,
        bspMaxExportBatchSize: 512,
      },
    },
  }));
});

afterAll(async () => {
  await server?.close();
  await receiver?.close();
});

/** Each span's name, indented under its parent's. */
function tree(spans: readonly ReceivedSpan[], root: ReceivedSpan, depth = 0): string[] {
  const lines = [`${"  ".repeat(depth)}${root.name}`];
  const children = spans
    .filter((s) => s.parentSpanId === root.spanId)
    .sort((a, b) => (a.startNs < b.startNs ? -1 : a.startNs > b.startNs ? 1 : 0));
  for (const child of children) lines.push(...tree(spans, child, depth + 1));
  return lines;
}

describe("a traced text_to_video request", () => {
  it("shows every pipeline step and BLS call as a child span of the request's, within it in time", async () => {
    await generateVideo(client, { prompt: "a red fox running in snow", frames: 5, steps: 4, resolution: "64x64" });
    await receiver.waitFor((spans) => spans.some((s) => s.name === "InferRequest"));
    const root = receiver.spans.find((s) => s.name === "InferRequest") as ReceivedSpan;
    await receiver.waitFor((spans) => spans.filter((s) => s.traceId === root.traceId).every((s) => s.endNs > 0n));
    const spans = receiver.spans.filter((s) => s.traceId === root.traceId);
    // Children in the order they started; a model's "compute" is its execution.
    expect(tree(spans, root)).toEqual([
      "InferRequest",
      "  text_to_video",
      "    compute",
      "    preflight",
      "      compute",
      "    encode_prompt",
      "      tokenizer",
      "        compute",
      "      text_encoder",
      "        compute",
      ...Array.from({ length: 4 }, () => ["    denoiser", "      compute"]).flat(),
      "    vae_decoder",
      "      compute",
      "    upscale_video",
      "      super_resolution",
      "        compute",
      "      frame_interpolation",
      "        compute",
    ]);
    const pipeline = spans.find((s) => s.name === "text_to_video") as ReceivedSpan;
    expect(pipeline.parentSpanId).toBe(root.spanId);
    for (const span of spans) {
      if (span === root) continue;
      const parent = spans.find((p) => p.spanId === span.parentSpanId);
      expect(parent, `${span.name}'s parent`).toBeDefined();
      expect(span.startNs).toBeGreaterThanOrEqual((parent as ReceivedSpan).startNs);
      expect(span.endNs).toBeLessThanOrEqual((parent as ReceivedSpan).endNs);
    }
  });
});
