import { afterEach, describe, expect, it } from "vitest";
import type { InferenceError } from "../../base/errors.js";
import { createLogger } from "../../base/log.js";
import { createInstanceHost, type InstanceHost } from "./instance-host.js";
import { type NativeInstance, nativeTransport } from "./native-transport.js";

interface Protocol {
  init: { fail?: string };
  info: { id: number };
  batch: { value: string; reject?: boolean };
  result: string;
  response: never;
  toInstance: never;
  fromInstance: never;
}

const hosts = new Set<InstanceHost<Protocol>>();
afterEach(async () => {
  await Promise.all([...hosts].map((h) => h.close(0)));
  hosts.clear();
});

/** A host over fake native instances; `created` lists each instance's calls. */
function host(init: Protocol["init"] = {}) {
  const created: string[][] = [];
  const transport = nativeTransport<Protocol>(() => {
    const calls: string[] = [];
    created.push(calls);
    const instance: NativeInstance<Protocol> = {
      async start(i) {
        calls.push("start");
        if (i.fail) throw new Error(i.fail);
        return { id: created.length };
      },
      async execute(batch) {
        calls.push(`execute ${batch.value}`);
        if (batch.reject) throw new Error("the thread is gone");
        return batch.value.toUpperCase();
      },
      async close() {
        calls.push("close");
      },
    };
    return instance;
  });
  const h = createInstanceHost<Protocol>({
    name: "native_0",
    model: "native",
    transport,
    init,
    log: createLogger({ write: () => undefined }),
  });
  hosts.add(h);
  return { host: h, created };
}

describe("nativeTransport", () => {
  it("starts, executes and stops an instance through the host's messages", async () => {
    const { host: h, created } = host();
    expect(await h.start()).toEqual({ id: 1 });
    expect(await h.execute({ value: "a" })).toBe("A");
    expect(await h.execute({ value: "b" })).toBe("B");
    await h.close();
    expect(created).toEqual([["start", "execute a", "execute b", "close"]]);
  });

  it("fails the start with the instance's own message", async () => {
    const { host: h, created } = host({ fail: "no such file" });
    await expect(h.start()).rejects.toThrow("no such file");
    expect(created[0]).toEqual(["start", "close"]);
  });

  it("ends an instance whose execute rejects: the batch fails, a fresh instance takes over", async () => {
    const { host: h, created } = host();
    await h.start();
    const error = (await h.execute({ value: "x", reject: true }).catch((e) => e)) as InferenceError;
    expect(error.id).toBe("BACKEND_FAILED");
    expect(error.message).toBe("model instance 'native_0' failed: the thread is gone; the instance is restarting");
    await h.ready();
    expect(await h.execute({ value: "y" })).toBe("Y");
    expect(created).toEqual([
      ["start", "execute x", "close"],
      ["start", "execute y"],
    ]);
    expect(h.restarts).toBe(1);
  });
});
