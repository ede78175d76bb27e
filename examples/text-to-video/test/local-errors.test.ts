// galley-video's local mistakes (paths, formats, an address that is not a gRPC port) are told as
// such, before any work on the server: the server address here is one nothing listens on (or a
// plain HTTP/1.1 server), so a check that came after contacting it would read "cannot reach".
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runCli } from "../src/cli.js";
import { createProgress } from "../src/progress.js";

const dir = mkdtempSync(join(tmpdir(), "galley-video-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function capture() {
  let text = "";
  return {
    write: (t: string) => (text += t),
    get text() {
      return text;
    },
  };
}

/** Run galley-video against an address nothing listens on; exit code and stderr. */
async function run(args: string[], url = "127.0.0.1:9") {
  const stderr = capture();
  const stdout = capture();
  const code = await runCli([...args, "-u", url], { stdout, stderr });
  return { code, stderr: stderr.text, stdout: stdout.text };
}

describe("galley-video checks its files before asking the server", () => {
  it("--out in a folder that does not exist", async () => {
    const { code, stderr, stdout } = await run(["a fox", "--out", "/nonexistent/dir/x.gif"]);
    expect(code).toBe(2);
    expect(stderr).toBe("galley-video: --out /nonexistent/dir/x.gif: the folder /nonexistent/dir does not exist\n");
    expect(stdout).toBe("");
  });

  it("--out that is not a .gif, or is a folder", async () => {
    expect((await run(["a fox", "--out", join(dir, "x.png")])).stderr).toBe(
      `galley-video: --out ${join(dir, "x.png")}: galley-video writes animated GIFs only; give a file name ending in .gif (not .png)\n`,
    );
    expect((await run(["a fox", "--out", dir])).stderr).toMatch(
      /--out .* is a folder; give a file name ending in .gif/,
    );
  });

  it("--input that is not a GIF, is missing, or is a folder without PNG frames", async () => {
    const text = join(dir, "passwd");
    writeFileSync(text, "root:x:0:0:root:/root:/bin/bash\n");
    const notGif = await run(["--input", text]);
    expect(notGif.code).toBe(2);
    expect(notGif.stderr).toBe(
      `galley-video: --input ${text} is not a GIF (a GIF starts with GIF87a or GIF89a); give a .gif file or a folder of .png frames\n`,
    );
    expect((await run(["--input", join(dir, "missing.gif")])).stderr).toMatch(
      /--input .*missing.gif: no such file or folder/,
    );
    const empty = join(dir, "frames");
    (await import("node:fs")).mkdirSync(empty);
    expect((await run(["--input", empty])).stderr).toMatch(/--input .*frames: the folder has no .png files/);
    writeFileSync(join(empty, "0001.png"), "not a png");
    expect((await run(["--input", empty])).stderr).toMatch(/--input .*frames: 0001.png is not a PNG image/);
  });
});

describe("galley-video at a port that does not speak gRPC", () => {
  let http: Server;
  afterAll(() => new Promise((resolve) => http.close(resolve)));

  it("says it answers HTTP/1.1 and asks for the gRPC port (exit 1), not 'Protocol error'", async () => {
    http = createServer((_, res) => res.end());
    await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
    const url = `127.0.0.1:${(http.address() as { port: number }).port}`;
    const { code, stderr } = await run(["a fox", "--out", join(dir, "v.gif")], url);
    expect(code).toBe(1);
    expect(stderr).toBe(
      `galley-video: ${url} is not a gRPC port: it answers HTTP/1.1 (status 200), as the server's HTTP and metrics ports do; galley-video speaks gRPC: give -u the server's gRPC port (galley serve --grpc-port, default 8001)\n`,
    );
  });
});

describe("progress", () => {
  /** Plain lines, a clock the test moves. */
  function lines() {
    const out = capture();
    let t = 0;
    const progress = createProgress(out, () => t);
    return { out, progress, at: (ms: number) => (t = ms) };
  }

  it("the ETA is to the end of the stage's even steps, from the stage's own pace", () => {
    const { out, progress, at } = lines();
    at(1000); // connecting and encoding the prompt: not a step
    progress.update({ stage: "denoise", step: 1, total: 12, until: 10 });
    expect(out.text).toBe("step 1/12 denoise 1.0s stage ETA --\n");
    at(1500);
    progress.update({ stage: "denoise", step: 6, total: 12, until: 10 });
    expect(out.text.split("\n")[1]).toBe("step 6/12 denoise 1.5s stage ETA 0.4s");
  });

  it("no ETA for a stage it cannot measure, never 0.0s with work left", () => {
    const { out, progress, at } = lines();
    at(100);
    progress.update({ stage: "denoise", step: 10, total: 12, until: 10 });
    at(200);
    progress.update({ stage: "decode", step: 11, total: 12, until: 10 });
    expect(out.text).toBe("step 10/12 denoise 0.1s\nstep 11/12 decode  0.2s\n");
  });

  it("a new stage is measured from its start: the second stage's pace, not the first's", () => {
    const { out, progress, at } = lines();
    at(100);
    progress.update({ stage: "upscale", step: 2, total: 5, until: 2 });
    at(2100);
    progress.update({ stage: "interpolate", step: 3, total: 5, until: 5 });
    expect(out.text.split("\n")[1]).toBe("step 3/5 interpolate 2.1s stage ETA 4.0s");
  });
});
