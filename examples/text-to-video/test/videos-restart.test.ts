// A real `galley serve --videos-api` process killed with SIGKILL in the middle of a job, then
// started again on the same jobs folder: the queued job stays queued and runs, the interrupted
// one is run again (the default: two attempts), and after a second kill mid-run it is failed
// `interrupted`; a SIGTERM queues a running job again without counting its start. Every poll in
// between sees a status the job really had.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { call, MODELS, waitFor } from "./videos-helpers.js";

const GALLEY = fileURLToPath(new URL("../../../packages/server/bin/galley.js", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "galley-restart-"));
const children: ChildProcess[] = [];

afterAll(() => {
  for (const child of children) if (child.exitCode === null) child.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

/** Start `galley serve` on the shared jobs folder; resolves with its HTTP base URL once it serves. */
async function serve(): Promise<{ child: ChildProcess; base: string }> {
  const child = spawn(
    process.execPath,
    [
      GALLEY,
      "serve",
      `--model-repository=${MODELS}`,
      "--http-address=127.0.0.1",
      "--http-port=0",
      "--allow-grpc=false",
      "--allow-metrics=false",
      "--videos-api=true",
      `--jobs-dir=${dir}`,
      "--videos-concurrency=1",
      "--videos-ffmpeg=none",
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  children.push(child);
  let output = "";
  const base = await new Promise<string>((resolve, reject) => {
    const read = (chunk: Buffer) => {
      output += chunk.toString();
      const match = /Started HTTPService at (\S+)/.exec(output);
      if (match) resolve(`http://${match[1]}`);
    };
    child.stdout?.on("data", read);
    child.stderr?.on("data", read);
    child.once("exit", (code) => reject(new Error(`galley serve exited (${code}): ${output}`)));
  });
  return { child, base };
}

async function kill(child: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGKILL");
  await exited;
}

describe("galley serve --videos-api across SIGKILL", () => {
  it("keeps queued jobs, runs an interrupted one again, and fails it after its last attempt", async () => {
    const small = { model: "text_to_video", prompt: "after the crash", size: "64x64", frames: 3, steps: 2 };
    const first = await serve();
    const long = await call(first.base, "POST", "/v1/videos", { ...small, prompt: "interrupted", steps: 1000 });
    const queued = await call(first.base, "POST", "/v1/videos", small);
    await waitFor(first.base, long.body.id, (v) => v.status === "in_progress" && v.progress > 0);
    expect((await call(first.base, "GET", `/v1/videos/${queued.body.id}`)).body).toMatchObject({
      status: "queued",
      queue_position: 0,
    });
    await kill(first.child);

    // Started again: the interrupted job is queued again and runs first (it is the older).
    const second = await serve();
    const seen = new Set<string>();
    await waitFor(second.base, long.body.id, (v) => v.status === "in_progress" && v.progress > 0, {
      each: (v) => seen.add((v as { status: string }).status),
    });
    expect([...seen].every((s) => s === "queued" || s === "in_progress")).toBe(true);
    expect((await call(second.base, "GET", `/v1/videos/${queued.body.id}`)).body.status).toBe("queued");
    await kill(second.child);

    // Killed on its second attempt: failed `interrupted`; the queued one then runs to the end.
    const third = await serve();
    const failed = await call(third.base, "GET", `/v1/videos/${long.body.id}`);
    expect(failed.body).toMatchObject({ status: "failed", error: { code: "interrupted" } });
    const done = await waitFor(third.base, queued.body.id, (v) => v.status === "completed");
    expect(done.progress).toBe(100);
    const content = await fetch(`${third.base}/v1/videos/${queued.body.id}/content`);
    expect(content.status).toBe(200);
    expect(
      Buffer.from(await content.arrayBuffer())
        .subarray(0, 6)
        .toString("latin1"),
    ).toBe("GIF89a");

    // A graceful stop (SIGTERM) queues the running job again without counting its start: after
    // it and one more crash, the job is still queued again rather than failed.
    const again = await call(third.base, "POST", "/v1/videos", { ...small, prompt: "stopped gracefully", steps: 1000 });
    await waitFor(third.base, again.body.id, (v) => v.status === "in_progress" && v.progress > 0);
    const stopped = new Promise((resolve) => third.child.once("exit", resolve));
    third.child.kill("SIGTERM");
    expect(await stopped).toBe(0);
    const fourth = await serve();
    expect(["queued", "in_progress"]).toContain(
      (await call(fourth.base, "GET", `/v1/videos/${again.body.id}`)).body.status,
    );
    await waitFor(fourth.base, again.body.id, (v) => v.status === "in_progress" && v.progress > 0);
    await kill(fourth.child);
    const fifth = await serve();
    await waitFor(fifth.base, again.body.id, (v) => v.status === "in_progress");
    expect((await call(fifth.base, "DELETE", `/v1/videos/${again.body.id}`)).body.status).toBe("cancelled");
    await kill(fifth.child);
  }, 120_000);
});
