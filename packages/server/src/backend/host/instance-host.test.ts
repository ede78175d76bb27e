import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { waitFor } from "../../../test/support/harness.js";
import type { InferenceError } from "../../base/errors.js";
import { createLogger } from "../../base/log.js";
import { createInstanceHost, type InstanceHost, type InstanceHostOptions } from "./instance-host.js";
import { workerTransport } from "./worker-transport.js";

/** The payloads of test/support/echo-instance.mjs, a real worker thread speaking the host's protocol. */
interface EchoProtocol {
  init: { failIfExists?: string; hang?: boolean; ignoreStop?: boolean };
  info: { threadId: number };
  batch:
    | { op: "echo"; value: string }
    | { op: "stream"; key: number; n: number }
    | { op: "wait-cancel"; key: number }
    | { op: "exit"; code: number }
    | { op: "hang" };
  result: string;
  response: number | string;
  toInstance: { kind: "ping"; value: string };
  fromInstance: { kind: "pong"; value: string };
}

const ECHO = new URL("../../../test/support/echo-instance.mjs", import.meta.url);

const hosts = new Set<InstanceHost<EchoProtocol>>();
const folders = new Set<string>();

afterEach(async () => {
  await Promise.all([...hosts].map((h) => h.close(0)));
  hosts.clear();
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
  folders.clear();
});

function echoHost(options: Partial<InstanceHostOptions<EchoProtocol>> = {}) {
  const lines: string[] = [];
  const host = createInstanceHost<EchoProtocol>({
    name: "echo_0",
    model: "echo",
    transport: workerTransport({ entry: ECHO, name: "echo_0" }),
    init: {},
    log: createLogger({ write: (line) => lines.push(line.trimEnd()) }),
    ...options,
  });
  hosts.add(host);
  return { host, lines };
}

/** What a rejected promise was rejected with, as id, code and message. */
async function failure(promise: Promise<unknown>): Promise<[string, string, string]> {
  try {
    await promise;
  } catch (error) {
    const e = error as InferenceError;
    return [e.id, e.code, e.message];
  }
  throw new Error("it succeeded");
}

describe("an instance host over a worker thread", () => {
  it("starts, runs batches, routes the backend's own messages, and closes gracefully", async () => {
    const pongs: string[] = [];
    const { host } = echoHost({ onMessage: (message) => pongs.push(message.value) });
    expect(host.health).toBe("starting");
    const info = await host.start();
    expect(info.threadId).toBeGreaterThan(0);
    expect(host.health).toBe("up");
    expect(
      await Promise.all([host.execute({ op: "echo", value: "a" }), host.execute({ op: "echo", value: "b" })]),
    ).toEqual(["a", "b"]);
    host.post({ kind: "ping", value: "p" });
    await waitFor(() => pongs.length > 0, { what: "the pong" });
    expect(pongs).toEqual(["p"]);
    await host.close();
    expect(host.health).toBe("closed");
    expect(await failure(host.execute({ op: "echo", value: "late" }))).toEqual([
      "BACKEND_FAILED",
      "INTERNAL",
      "model instance 'echo_0' was unloaded",
    ]);
  });

  it("streams several responses per request, then the final one, and forwards a cancel", async () => {
    const { host } = echoHost();
    await host.start();
    const seen: [number | string | undefined, boolean][] = [];
    const key = host.open({ respond: (response, final) => seen.push([response, final]), fail: () => undefined });
    expect(await host.execute({ op: "stream", key, n: 3 })).toBe("streamed");
    expect(seen).toEqual([
      [0, false],
      [1, false],
      [2, false],
      [undefined, true],
    ]);
    expect(host.request(key)).toBeUndefined();

    const controller = new AbortController();
    const cancelled = new Promise<number | string | undefined>((resolve) => {
      const waiting = host.open({ signal: controller.signal, respond: resolve, fail: () => undefined });
      void host.execute({ op: "wait-cancel", key: waiting }).then(() => controller.abort());
    });
    expect(await cancelled).toBe("cancelled");
  });

  it("fails everything in flight with one error when the instance dies, and restarts it at once", async () => {
    const downs: InferenceError[] = [];
    const { host, lines } = echoHost({ onDown: (error) => downs.push(error) });
    const first = await host.start();
    const failed: InferenceError[] = [];
    host.open({ respond: () => undefined, fail: (error) => failed.push(error) });
    const hung = host.execute({ op: "hang" });
    const exit = host.execute({ op: "exit", code: 3 });
    const message = "model instance 'echo_0' exited with code 3; the instance is restarting";
    expect(await failure(exit)).toEqual(["BACKEND_FAILED", "INTERNAL", message]);
    expect(await failure(hung)).toEqual(["BACKEND_FAILED", "INTERNAL", message]);
    expect(failed.map((e) => e.message)).toEqual([message]);
    expect(downs.map((e) => e.message)).toEqual([message]);
    expect(lines.at(-1)).toMatch(/model instance 'echo_0' exited with code 3; restarting it$/);
    expect(host.restarts).toBe(1);
    // Work sent while the fresh instance starts waits for it.
    expect(host.health).toBe("starting");
    expect(await host.execute({ op: "echo", value: "again" })).toBe("again");
    expect(host.info?.threadId).not.toBe(first.threadId);
  });

  it("backs off when restarts fail: work fails at once with MODEL_INSTANCE_RESTARTING until it is up again", async () => {
    const folder = mkdtempSync(join(tmpdir(), "galley-host-"));
    folders.add(folder);
    const flag = join(folder, "fail");
    const { host, lines } = echoHost({ init: { failIfExists: flag } });
    await host.start();
    writeFileSync(flag, "");
    await failure(host.execute({ op: "exit", code: 1 }));
    // The immediate restart fails to start, so the next one waits 100 ms.
    await waitFor(() => host.health === "restarting", { what: "the back-off" });
    expect(lines.at(-1)).toMatch(
      /model instance 'echo_0' failed to initialize: the flag file exists; restarting it in 100 ms$/,
    );
    const [id, code, message] = await failure(host.execute({ op: "echo", value: "x" }));
    expect([id, code]).toEqual(["MODEL_INSTANCE_RESTARTING", "UNAVAILABLE"]);
    expect(message).toMatch(
      /^model 'echo' is not available: its instance 'echo_0' failed to initialize: the flag file exists, and starts again in \d+ ms$/,
    );
    rmSync(flag);
    await waitFor(() => host.health === "up", { what: "the instance up again" });
    expect(await host.execute({ op: "echo", value: "back" })).toBe("back");
  });

  it("fails a start with the instance's own message, past its timeout, or when its signal aborts", async () => {
    const folder = mkdtempSync(join(tmpdir(), "galley-host-"));
    folders.add(folder);
    const flag = join(folder, "fail");
    writeFileSync(flag, "");
    const refused = echoHost({ init: { failIfExists: flag } }).host;
    expect((await failure(refused.start()))[2]).toBe("the flag file exists");
    expect(refused.health).toBe("closed");

    const slow = echoHost({ init: { hang: true }, startTimeoutMs: 200 }).host;
    expect((await failure(slow.start()))[2]).toBe(
      "model instance 'echo_0' did not finish initialize within 200 ms (initialize_timeout_ms)",
    );

    const controller = new AbortController();
    const aborted = echoHost({ init: { hang: true } }).host;
    const starting = failure(aborted.start(controller.signal));
    controller.abort();
    expect((await starting)[2]).toBe("model instance 'echo_0' was unloaded while it was initializing");
  });

  it("ends a batch past the execute timeout by restarting the instance", async () => {
    const { host } = echoHost({ executeTimeoutMs: 200 });
    await host.start();
    expect(await failure(host.execute({ op: "hang" }))).toEqual([
      "BACKEND_FAILED",
      "INTERNAL",
      "model instance 'echo_0' did not finish execute within 200 ms (execute_timeout_ms); the instance is restarting",
    ]);
    expect(await host.execute({ op: "echo", value: "next" })).toBe("next");
  });

  it("ends an instance that does not stop within the grace period, failing what it held", async () => {
    const { host } = echoHost({ init: { ignoreStop: true } });
    await host.start();
    const hung = failure(host.execute({ op: "hang" }));
    const started = performance.now();
    await host.close(150);
    expect(performance.now() - started).toBeGreaterThanOrEqual(140);
    expect((await hung)[2]).toBe("model instance 'echo_0' was unloaded");
    expect(host.health).toBe("closed");
  });
});
