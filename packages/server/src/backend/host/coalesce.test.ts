import { MessageChannel } from "node:worker_threads";
import { describe, expect, it } from "vitest";
import { type Coalesced, coalescingPost, forEachMessage } from "./coalesce.js";

interface Note {
  n: number;
  data?: Uint8Array;
}

/** A real port pair; what arrives, unpacked, and how many postMessage calls carried it. */
function channel() {
  const { port1, port2 } = new MessageChannel();
  const arrived: Note[] = [];
  let posts = 0;
  const received = new Promise<void>((resolve) => {
    port2.on("message", (message: Note | Coalesced<Note>) => {
      posts++;
      forEachMessage(message, (one) => arrived.push(one));
      if (arrived.some((a) => a.n === -1)) resolve();
    });
  });
  const close = () => {
    port1.close();
    port2.close();
  };
  return { port1, arrived, posts: () => posts, received, close };
}

describe("coalescingPost", () => {
  it("posts the first message at once and the rest of the run in one message, in order", async () => {
    const c = channel();
    const calls: number[] = [];
    const send = coalescingPost<Note>(
      (message, transfer) => {
        calls.push("messages" in message ? message.messages.length : 1);
        c.port1.postMessage(message, transfer);
      },
      (error) => {
        throw error;
      },
    );
    for (let n = 0; n < 5; n++) send({ n });
    expect(calls).toEqual([1]);
    await Promise.resolve().then(() => send({ n: 5 })); // a microtask of the same run
    send({ n: -1 }, []);
    await c.received;
    expect(calls).toEqual([1, 6]);
    expect(c.arrived.map((a) => a.n)).toEqual([0, 1, 2, 3, 4, 5, -1]);
    expect(c.posts()).toBe(2);
    c.close();
  });

  it("moves the buffers of a group, and copies a group whose buffer cannot move", async () => {
    const c = channel();
    const send = coalescingPost<Note>(
      (message, transfer) => c.port1.postMessage(message, transfer),
      (error) => {
        throw error;
      },
    );
    const own = new Uint8Array([1, 2, 3]);
    const pooled = Buffer.from("pooled"); // a slice of Node's Buffer pool: not transferable
    send({ n: 0 });
    send({ n: 1, data: own }, [own.buffer]);
    send({ n: 2, data: pooled }, [pooled.buffer]);
    send({ n: -1 });
    await c.received;
    expect(c.arrived.map((a) => [...(a.data ?? [])])).toEqual([[], [1, 2, 3], [...Buffer.from("pooled")], []]);
    expect(pooled.toString()).toBe("pooled"); // copied, still usable here
    c.close();
  });

  it("reports a message that cannot be posted at all", async () => {
    const failures: string[] = [];
    const send = coalescingPost<unknown>(
      () => {
        throw new Error("cannot clone");
      },
      (error) => failures.push((error as Error).message),
    );
    send({ n: 0 });
    send({ n: 1 });
    await new Promise<void>((resolve) => process.nextTick(resolve));
    expect(failures).toEqual(["cannot clone", "cannot clone"]);
  });
});
