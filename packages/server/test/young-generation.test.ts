// A served request's objects die young: nothing of it may reach the old generation, where only a
// full collection frees it. What survives a young collection is measured with V8's sampling heap
// profiler (objects freed by young collections left out), per request, over a few thousand
// requests one after another: a request then lives far shorter than the time between two young
// collections, so little of it may survive. One function literal assigned straight to a property
// (V8 makes those in the old generation, docs/guides/development.md) made every request survive,
// and the full collections that free them cost CPU on every core. (gRPC is not checked here:
// node:http2 itself lets ~2 KB of every stream survive, a bare server as much as Galley.)
import { Agent, request as httpRequest } from "node:http";
import { Session } from "node:inspector/promises";
import { afterEach, describe, expect, it } from "vitest";
import type { GalleyServer, Tensor } from "../src/index.js";
import { cleanup, fp32Bytes, int32Bytes, range, startServer } from "./support/harness.js";

afterEach(cleanup);

interface SampledNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children: SampledNode[];
}
interface SampledProfile {
  head: SampledNode;
  samples: { nodeId: number; size: number }[];
}

interface Survivors {
  /** Bytes per call that survived a young collection. */
  perCall: number;
  /** The allocation sites most of them came from, for the failure message. */
  sites: string;
}

/** What survived young collections over `n` calls of `run` after `warmup` calls. */
async function survivors(run: () => Promise<void>, n: number, warmup = 500): Promise<Survivors> {
  for (let i = 0; i < warmup; i++) await run();
  const session = new Session();
  session.connect();
  try {
    await session.post("HeapProfiler.enable");
    await session.post("HeapProfiler.startSampling", {
      samplingInterval: 256,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: false,
    });
    for (let i = 0; i < n; i++) await run();
    // The protocol's sampled profile; @types/node's copy predates `id` and `samples`.
    const { profile } = (await session.post("HeapProfiler.stopSampling")) as unknown as { profile: SampledProfile };
    const frames = new Map<number, string>();
    const visit = (node: SampledNode): void => {
      const { functionName, url, lineNumber } = node.callFrame;
      frames.set(node.id, `${functionName || "(anonymous)"} ${url.replace(/.*\//, "")}:${lineNumber + 1}`);
      for (const child of node.children) visit(child);
    };
    visit(profile.head);
    const bySite = new Map<string, number>();
    let total = 0;
    for (const { nodeId, size } of profile.samples) {
      total += size;
      const site = frames.get(nodeId) ?? "?";
      bySite.set(site, (bySite.get(site) ?? 0) + size);
    }
    const sites = [...bySite]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 8)
      .map(([site, bytes]) => `${Math.round(bytes / n)} B/request from ${site}`)
      .join("; ");
    return { perCall: total / n, sites };
  } finally {
    session.disconnect();
  }
}

/**
 * What young collections may let through per request above the runtime's own floor, in-process
 * and over REST (whose client, in this process too, adds its sockets' share). Measured on Node 26:
 * ~200–400 and ~1,000 bytes; with the function literal assigned to a property, 2,400 and 6,200.
 */
const LIMIT_BYTES = 1024;
const LIMIT_REST_BYTES = 2048;
const REQUESTS = 4000;

/**
 * The runtime's floor: what survives per request-shaped object graph (~2 KB) that has an abort
 * signal with a listener, removed one turn later — what any cancellable request does without
 * Galley. ~30 bytes on Node 22–26; Node 20's `AbortSignal`s survive young collections whatever
 * holds them (~1.3 KB here), so there the limits stand on top of that.
 */
async function runtimeFloor(): Promise<number> {
  const { perCall } = await survivors(
    () =>
      new Promise<void>((resolve) => {
        const controller = new AbortController();
        const graph = { inputs: Array.from({ length: 32 }, (_, i) => ({ name: `INPUT${i}`, shape: [1, 16] })) };
        const onAbort = () => graph.inputs.length;
        controller.signal.addEventListener("abort", onAbort, { once: true });
        setImmediate(() => {
          controller.signal.removeEventListener("abort", onAbort);
          resolve();
        });
      }),
    REQUESTS,
  );
  return perCall;
}

/**
 * A floor above this means the runtime keeps request-shaped graphs through young collections
 * itself (Node 20); there only a gross regression, over {@link RUNTIME_KEEPS_FACTOR} times the
 * floor, is told apart from the runtime's own share (in CI, 4.8 KB over REST on a 1.7 KB floor).
 */
const FLOOR_KEEPS_SIGNALS = 1024;
const RUNTIME_KEEPS_FACTOR = 4;

async function expectYoung(run: () => Promise<void>, limit: number): Promise<void> {
  const floor = await runtimeFloor();
  const { perCall, sites } = await survivors(run, REQUESTS);
  const bound = floor > FLOOR_KEEPS_SIGNALS ? RUNTIME_KEEPS_FACTOR * floor : floor + limit;
  expect(perCall, `runtime floor ${Math.round(floor)} B/request; ${sites}`).toBeLessThan(bound);
}

function inferCore(server: GalleyServer, model: string, inputs: Omit<Tensor, "parameters">[]) {
  return async () => {
    const controller = new AbortController();
    await server.core.infer({
      modelName: model,
      modelVersion: "",
      id: "",
      parameters: {},
      inputs: inputs.map((i) => ({ ...i, parameters: {} })),
      outputs: [],
      signal: controller.signal,
    });
  };
}

describe("a request's objects die young", () => {
  it("REST JSON on a model run by the default scheduler", async () => {
    const { server } = await startServer({ http: true, controlMode: "explicit", loadModels: ["simple"] });
    const port = (await server.listen()).http?.port;
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const body = JSON.stringify({
      inputs: [
        { name: "INPUT0", shape: [1, 16], datatype: "INT32", data: range(16) },
        { name: "INPUT1", shape: [1, 16], datatype: "INT32", data: range(16) },
      ],
    });
    const post = () =>
      new Promise<void>((resolve, reject) => {
        const req = httpRequest(
          { host: "127.0.0.1", port, method: "POST", path: "/v2/models/simple/infer", agent },
          (res) => {
            if (res.statusCode !== 200) reject(new Error(`HTTP ${res.statusCode}`));
            res.resume();
            res.on("end", resolve);
          },
        );
        req.on("error", reject);
        req.end(body);
      });
    try {
      await expectYoung(post, LIMIT_REST_BYTES);
    } finally {
      agent.destroy();
    }
  });

  it("in-process requests with a signal, default scheduler and dynamic batcher", async () => {
    const { server } = await startServer({ controlMode: "explicit", loadModels: ["simple", "mlp_classifier"] });
    const simple = inferCore(server, "simple", [
      { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: int32Bytes(range(16)) },
      { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: int32Bytes(range(16)) },
    ]);
    const mlp = inferCore(server, "mlp_classifier", [
      { name: "INPUT", datatype: "FP32", shape: [1, 64], data: fp32Bytes(range(64)) },
    ]);
    await expectYoung(simple, LIMIT_BYTES);
    await expectYoung(mlp, LIMIT_BYTES);
  });
});
