// The videos API over any decoupled model that declares `videos_api.*` parameters, not only the
// text-to-video example: a tiny JavaScript pipeline paints its video with the Triton `priority`
// its request came with, so the class → priority mapping is read back from the pixels (a GIF
// palette keeps a one-colour frame exact); and a model whose mapping is broken fails its job with
// the parameter's name, not a crash.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { cleanup, startServer, tempRepository } from "./support/harness.js";

afterEach(cleanup);

const PAINTER = `export default class {
  execute(requests) {
    for (const request of requests) {
      const sender = request.responseSender();
      const frames = request.input("N").typed()[0];
      const level = Number(request.parameters?.priority ?? 0);
      sender.send({ outputs: [
        { name: "STEP", datatype: "INT32", shape: [2], data: Int32Array.of(1, 2) },
        { name: "CLIP", datatype: "UINT8", shape: [0, 0, 0, 3], data: new Uint8Array(0) },
      ] });
      sender.send({ outputs: [
        { name: "STEP", datatype: "INT32", shape: [2], data: Int32Array.of(2, 2) },
        { name: "CLIP", datatype: "UINT8", shape: [frames, 4, 6, 3], data: new Uint8Array(frames * 4 * 6 * 3).fill(level * 40) },
      ] }, { final: true });
    }
  }
}`;

function painter(repo: string, name: string, parameters: Record<string, string>): void {
  mkdirSync(join(repo, name, "1"), { recursive: true });
  const params = Object.entries(parameters)
    .map(([k, v]) => `parameters { key: "videos_api.${k}", value: { string_value: "${v}" } }`)
    .join("\n");
  writeFileSync(
    join(repo, name, "config.pbtxt"),
    `name: "${name}"
backend: "js"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "TEXT", data_type: TYPE_STRING, dims: [ 1 ] }, { name: "N", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "STEP", data_type: TYPE_INT32, dims: [ 2 ] }, { name: "CLIP", data_type: TYPE_UINT8, dims: [ -1, -1, -1, 3 ] } ]
${params}
`,
  );
  writeFileSync(join(repo, name, "1", "model.mjs"), PAINTER);
}

// biome-ignore lint/suspicious/noExplicitAny: JSON as the test reads it
type Json = any;

async function post(base: string, body: unknown): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${base}/v1/videos`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

async function finished(base: string, id: string): Promise<Json> {
  for (;;) {
    const video: Json = await (await fetch(`${base}/v1/videos/${id}`)).json();
    if (video.status !== "queued" && video.status !== "in_progress") return video;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe("the videos API over any decoupled pipeline", () => {
  it("fills the declared inputs, reads progress and the video, and passes each class's priority", async () => {
    const repo = tempRepository();
    painter(repo, "painter", {
      prompt_input: "TEXT",
      frames_input: "N",
      max_frames: "4",
      default_frames: "2",
      sizes: "6x4",
      progress_output: "STEP",
      video_output: "CLIP",
      priorities: "high=1,normal=2,low=3",
    });
    // A second temporary folder (removed by cleanup) for the jobs.
    const jobsDir = tempRepository();
    const running = await startServer({ modelRepositories: [repo], http: true, jobs: { jobsDir, ffmpeg: false } });
    const base = running.httpUrl as string;
    for (const [priority, level] of [
      ["high", 1],
      ["normal", 2],
      ["low", 3],
    ] as const) {
      const created = await post(base, { model: "painter", prompt: "paint", priority, frames: 3 });
      expect(created.status).toBe(200);
      const video = await finished(base, created.body.id);
      expect(video).toMatchObject({ status: "completed", progress: 100, frames: 3, size: "" });
      const gif = Buffer.from(await (await fetch(`${base}/v1/videos/${video.id}/content`)).arrayBuffer());
      expect(gif.subarray(0, 6).toString("latin1")).toBe("GIF89a");
      // Logical screen 6x4; the first palette entry is the one colour of the frame.
      expect([gif.readUInt16LE(6), gif.readUInt16LE(8)]).toEqual([6, 4]);
      expect(gif[13]).toBe(level * 40);
    }
    expect((await post(base, { model: "painter", prompt: "p", frames: 5 })).body.error.param).toBe("frames");
  });

  it("fails a job with the parameter's name when a model's mapping is broken, and serves the others", async () => {
    const repo = tempRepository();
    painter(repo, "broken", { prompt_input: "TEXT", video_output: "CLIP", max_frames: "zero" });
    // A second temporary folder (removed by cleanup) for the jobs.
    const jobsDir = tempRepository();
    const running = await startServer({ modelRepositories: [repo], http: true, jobs: { jobsDir, ffmpeg: false } });
    const answer = await post(running.httpUrl as string, { model: "broken", prompt: "p" });
    expect(answer.status).toBe(500);
    expect(answer.body.error.message).toBe("broken: videos_api.max_frames must be a whole number >= 1, not 'zero'");
    expect((await fetch(`${running.httpUrl}/v2/health/ready`)).status).toBe(200);
  });
});
