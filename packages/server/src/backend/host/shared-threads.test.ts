import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { waitFor } from "../../../test/support/harness.js";
import { JS_WORKER_URL } from "../js/js-instance.js";
import type { FromWorker, ToWorker } from "../js/js-messages.js";
import type { InstanceTransport } from "./instance-transport.js";
import { SharedThreads } from "./shared-threads.js";

const folders: string[] = [];
afterEach(() => {
  for (const folder of folders.splice(0)) rmSync(folder, { recursive: true, force: true });
});

/** A scripted model file that answers nothing but `isReady`. */
function modelFile(): string {
  const folder = mkdtempSync(join(tmpdir(), "galley-shared-"));
  folders.push(folder);
  const file = join(folder, "model.mjs");
  writeFileSync(file, "export default class Idle { execute(requests) { return requests.map(() => ({})); } }");
  return file;
}

/** An instance on `threads`' thread `index`, started; its messages and its end are recorded. */
async function instance(threads: SharedThreads, index: number, file: string) {
  const messages: FromWorker[] = [];
  const ended: string[] = [];
  const transport: InstanceTransport<ToWorker> = threads.transport<ToWorker, FromWorker>(index)({
    message: (message) => messages.push(message),
    ended: (reason) => ended.push(reason),
  });
  transport.send({
    kind: "start",
    init: { file, args: {}, decoupled: false, outputs: [], errors: {} as never },
  });
  await waitFor(() => messages.some((m) => m.kind === "started"), { what: "the instance to start" });
  /** Whether the instance answers an `isReady` probe. */
  const answers = async (probe: number) => {
    transport.send({ kind: "is-ready", probe });
    await waitFor(() => messages.some((m) => m.kind === "ready" && m.probe === probe), { what: `probe ${probe}` });
    return true;
  };
  return { transport, messages, ended, answers };
}

describe("SharedThreads", () => {
  it("runs instances of one index on one thread, and ends it when the last one leaves", async () => {
    const threads = new SharedThreads({ entry: JS_WORKER_URL, name: "test", lingerMs: 0 });
    const file = modelFile();
    const a = await instance(threads, 0, file);
    const b = await instance(threads, 0, file);
    const c = await instance(threads, 1, file);
    expect(threads.running).toBe(2);
    await a.transport.kill();
    expect(a.ended).toEqual(["was stopped"]);
    expect(await b.answers(1)).toBe(true);
    expect(threads.running).toBe(2);
    await b.transport.kill();
    expect(threads.running).toBe(1);
    await c.transport.kill();
    expect(threads.running).toBe(0);
  });

  it("a message that cannot be sent ends that instance only", async () => {
    const threads = new SharedThreads({ entry: JS_WORKER_URL, name: "test", lingerMs: 0 });
    const file = modelFile();
    const a = await instance(threads, 0, file);
    const b = await instance(threads, 0, file);
    a.transport.send({ kind: "is-ready", probe: 1, unclonable: () => undefined } as never);
    expect(a.ended).toHaveLength(1);
    expect(a.ended[0]).toMatch(/^could not be sent a message \(.*could not be cloned/);
    expect(await b.answers(2)).toBe(true);
    expect(b.ended).toEqual([]);
    await b.transport.kill();
    expect(threads.running).toBe(0);
  });

  it("a thread without instances lingers for the next one", async () => {
    const threads = new SharedThreads({ entry: JS_WORKER_URL, name: "test", lingerMs: 60_000 });
    const file = modelFile();
    const a = await instance(threads, 0, file);
    await a.transport.kill();
    expect(threads.running).toBe(1);
    const b = await instance(threads, 0, file);
    expect(threads.running).toBe(1);
    expect(await b.answers(1)).toBe(true);
    await b.transport.kill();
  });
});
