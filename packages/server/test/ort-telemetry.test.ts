// ONNX Runtime's telemetry is off in `galley serve` unless the user opts in: a server that loads an
// ONNX model (on the event loop or in a worker thread only) and runs it writes nothing into its
// temp folder or its home, while `ORT_DISABLE_TELEMETRY=0` gets the library's `.ses` and
// `mat-debug-<pid>.log` files back (which shows the test can see them).
import { appendFileSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { cleanup, copyModel, range, tempRepository, waitFor } from "./support/harness.js";
import { killChildren, serveArgs, spawnCli } from "./support/process.js";

const folders: string[] = [];

afterEach(async () => {
  killChildren();
  await cleanup();
  for (const folder of folders.splice(0)) rmSync(folder, { recursive: true, force: true });
});

/** A fresh empty folder. */
function emptyFolder(prefix: string): string {
  const folder = mkdtempSync(join(tmpdir(), prefix));
  folders.push(folder);
  return folder;
}

/** Every path under `folder`, relative to it. */
function contents(folder: string): string[] {
  return readdirSync(folder, { recursive: true, encoding: "utf8" }).sort();
}

/**
 * A repository with `simple`, run on the event loop (`inline`) or only in its worker thread
 * (`worker`: `inline_max_run_us: 0` keeps onnxruntime off the main thread).
 */
function repository(where: "inline" | "worker"): string {
  const repo = tempRepository();
  const model = copyModel("simple", repo);
  if (where === "worker") {
    appendFileSync(
      join(model, "config.pbtxt"),
      'parameters [ { key: "inline_max_run_us" value: { string_value: "0" } } ]\n',
    );
  }
  return repo;
}

/**
 * Serve `repo` with `env` added to a temp folder and a home of their own; run `simple` once; wait
 * for `until` (what the server writes in its temp folder), if given; stop.
 */
async function serveOnce(
  repo: string,
  env: Record<string, string> = {},
  until?: (temp: string) => boolean,
): Promise<{ temp: string; home: string }> {
  const temp = emptyFolder("galley-ort-tmp-");
  const home = emptyFolder("galley-ort-home-");
  const base: NodeJS.ProcessEnv = { ...process.env };
  delete base.ORT_DISABLE_TELEMETRY;
  // ONNX Runtime keeps its telemetry off on a CI machine (`CI=true`, as .ci/run sets): without
  // these the library would be silent whatever Galley does, and the test could not fail.
  for (const name of [
    "CI",
    "CONTINUOUS_INTEGRATION",
    "TF_BUILD",
    "GITHUB_ACTIONS",
    "BUILD_ID",
    "BUILD_NUMBER",
    "RUN_ID",
  ])
    delete base[name];
  const cli = spawnCli(
    serveArgs(repo),
    // Node's compile cache (`galley serve` keeps it in the temp folder, serving.md) is Galley's own
    // and documented; off here, so that every file left in the folder is somebody else's.
    {
      ...base,
      TMPDIR: temp,
      HOME: home,
      XDG_CACHE_HOME: join(home, ".cache"),
      NODE_DISABLE_COMPILE_CACHE: "1",
      ...env,
    },
  );
  const [, http] = await cli.waitFor(/Started HTTPService at (\S+)/);
  const data = range(16);
  const response = await fetch(`http://${http}/v2/models/simple/infer`, {
    method: "POST",
    body: JSON.stringify({
      inputs: [
        { name: "INPUT0", shape: [1, 16], datatype: "INT32", data },
        { name: "INPUT1", shape: [1, 16], datatype: "INT32", data },
      ],
    }),
  });
  expect(response.status).toBe(200);
  const body = (await response.json()) as { outputs: { name: string; data: number[] }[] };
  expect(body.outputs.find((o) => o.name === "OUTPUT0")?.data).toEqual(data.map((v) => 2 * v));
  // The library writes its files from a thread of its own, some time after it starts.
  if (until) await waitFor(() => until(temp), { what: "ONNX Runtime's telemetry files" });
  cli.child.kill("SIGTERM");
  expect(await cli.exited).toBe(0);
  return { temp, home };
}

describe("ONNX Runtime telemetry", () => {
  it("is off by default: a session on the event loop leaves no files", async () => {
    const { temp, home } = await serveOnce(repository("inline"));
    expect(contents(temp)).toEqual([]);
    expect(contents(home)).toEqual([]);
  }, 60_000);

  it("is off by default: a session only in a worker thread leaves no files", async () => {
    const { temp, home } = await serveOnce(repository("worker"));
    expect(contents(temp)).toEqual([]);
    expect(contents(home)).toEqual([]);
  }, 60_000);

  it("is on when the user sets ORT_DISABLE_TELEMETRY=0", async () => {
    const written = (temp: string) =>
      contents(temp).some((f) => /^mat-debug-\d+\.log$/.test(f)) && contents(temp).includes(".ses");
    const { temp } = await serveOnce(repository("worker"), { ORT_DISABLE_TELEMETRY: "0" }, written);
    const files = contents(temp);
    expect(files).toContain(".ses");
    expect(files.filter((f) => /^mat-debug-\d+\.log$/.test(f))).toHaveLength(1);
  }, 60_000);
});
