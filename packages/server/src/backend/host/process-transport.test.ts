import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../../base/log.js";
import type { InstanceTransport } from "./instance-transport.js";
import { encodeFrame, frameReader, processTransport, sharedProcess } from "./process-transport.js";

const folders: string[] = [];
afterEach(() => {
  for (const folder of folders.splice(0)) rmSync(folder, { recursive: true, force: true });
});

/** A child speaking the frame protocol on fd 3: echoes each message back, or obeys it. */
const ECHO = `
const net = require("node:net");
const sock = new net.Socket({ fd: 3, readable: true, writable: true });
let buf = Buffer.alloc(0);
sock.on("data", (chunk) => {
  buf = Buffer.concat([buf, chunk]);
  while (buf.length >= 4 && buf.length >= 4 + buf.readUInt32LE(0)) {
    const msg = JSON.parse(buf.subarray(4, 4 + buf.readUInt32LE(0)).toString());
    buf = buf.subarray(4 + buf.readUInt32LE(0));
    if (msg.op === "exit") process.exit(msg.code);
    if (msg.op === "garbage") { const b = Buffer.from("xxxxnot json"); b.writeUInt32LE(8, 0); sock.write(b); continue; }
    if (msg.op === "print") { console.log(msg.text); console.error("err " + msg.text); }
    if (msg.op === "ignore-term") { process.on("SIGTERM", () => {}); }
    const body = Buffer.from(JSON.stringify({ echo: msg }));
    const head = Buffer.alloc(4); head.writeUInt32LE(body.length, 0);
    sock.write(Buffer.concat([head, body]));
  }
});
sock.on("end", () => process.exit(0));
`;

function start(killGraceMs = 2000) {
  const folder = mkdtempSync(join(tmpdir(), "galley-process-transport-"));
  folders.push(folder);
  const file = join(folder, "child.cjs");
  writeFileSync(file, ECHO);
  const lines: string[] = [];
  const messages: unknown[] = [];
  let ended: (reason: string) => void = () => undefined;
  const end = new Promise<string>((resolve) => {
    ended = resolve;
  });
  let wake: (() => void) | undefined;
  const transport: InstanceTransport<unknown> = processTransport<unknown, unknown>({
    command: process.execPath,
    args: [file],
    name: "child_0",
    log: createLogger({ write: (line) => lines.push(line.trimEnd()) }),
    killGraceMs,
  })({
    message: (m) => {
      messages.push(m);
      wake?.();
    },
    ended,
  });
  const next = async () => {
    while (messages.length === 0) await new Promise<void>((r) => (wake = r));
    return messages.shift();
  };
  return { transport, lines, next, end };
}

describe("processTransport", () => {
  it("carries frames both ways and logs the child's output lines", async () => {
    const { transport, next, lines, end } = start();
    transport.send({ op: "print", text: "hello" });
    expect(await next()).toEqual({ echo: { op: "print", text: "hello" } });
    transport.send({ op: "big", data: "x".repeat(300_000) });
    expect(((await next()) as { echo: { data: string } }).echo.data).toHaveLength(300_000);
    await transport.kill();
    expect(await end).toMatch(/exited with code 0|was killed by SIGTERM/);
    expect(lines.some((l) => l.endsWith("child_0: hello"))).toBe(true);
    expect(lines.some((l) => l.includes("W") && l.endsWith("child_0: err hello"))).toBe(true);
  });

  it("reports an exit with its code", async () => {
    const { transport, end } = start();
    transport.send({ op: "exit", code: 4 });
    expect(await end).toBe("exited with code 4");
  });

  it("ends a child that sends what cannot be read", async () => {
    const { transport, end } = start();
    transport.send({ op: "garbage" });
    expect(await end).toMatch(/^sent a message the server could not read/);
    await transport.kill();
  });

  it("kills a child that ignores SIGTERM after the grace", async () => {
    const { transport, next, end } = start(100);
    transport.send({ op: "ignore-term" });
    await next();
    await transport.kill();
    expect(await end).toMatch(/was killed by SIGKILL|exited with code 0/);
  });

  it("reports a program that cannot start", async () => {
    let reason = "";
    await new Promise<void>((resolve) => {
      processTransport({
        command: "/nonexistent/python3",
        args: [],
        name: "x",
        log: createLogger({ write: () => undefined }),
      })({
        message: () => undefined,
        ended: (r) => {
          reason = r;
          resolve();
        },
      });
    });
    expect(reason).toMatch(/could not be started: spawn \/nonexistent\/python3 ENOENT/);
  });
});

/** A child serving GALLEY_STUB_CHANNELS sockets (fd 3, 4, ...): echoes with its pid; exits once all closed. */
const CHANNELS = `
const net = require("node:net");
const n = Number(process.env.GALLEY_STUB_CHANNELS ?? "1");
let open = n;
for (let i = 0; i < n; i++) {
  const sock = new net.Socket({ fd: 3 + i, readable: true, writable: true });
  let buf = Buffer.alloc(0);
  sock.on("data", (chunk) => {
    buf = Buffer.concat([buf, chunk]);
    while (buf.length >= 4 && buf.length >= 4 + buf.readUInt32LE(0)) {
      const msg = JSON.parse(buf.subarray(4, 4 + buf.readUInt32LE(0)).toString());
      buf = buf.subarray(4 + buf.readUInt32LE(0));
      if (msg.op === "exit") process.exit(msg.code);
      const body = Buffer.from(JSON.stringify({ echo: msg, channel: i, pid: process.pid }));
      const head = Buffer.alloc(4); head.writeUInt32LE(body.length, 0);
      sock.write(Buffer.concat([head, body]));
    }
  });
  sock.on("error", () => {});
  sock.on("end", () => { sock.end(); if (--open === 0) process.exit(0); });
}
`;

interface Echo {
  channel: number;
  pid: number;
}

function shared(channels: number) {
  const folder = mkdtempSync(join(tmpdir(), "galley-shared-process-"));
  folders.push(folder);
  const file = join(folder, "child.cjs");
  writeFileSync(file, CHANNELS);
  const revived: number[] = [];
  const process_ = sharedProcess<unknown, Echo>({
    command: process.execPath,
    args: [file],
    name: "child",
    log: createLogger({ write: () => undefined }),
    channels,
  });
  const instance = (channel: number) => {
    const messages: Echo[] = [];
    let wake: (() => void) | undefined;
    let ended: (reason: string) => void = () => undefined;
    const end = new Promise<string>((resolve) => {
      ended = resolve;
    });
    const start = () =>
      process_.transport(channel, () => revived.push(channel))({
        message: (m) => {
          messages.push(m);
          wake?.();
        },
        ended,
      });
    const transport = start();
    const next = async () => {
      while (messages.length === 0) await new Promise<void>((r) => (wake = r));
      return messages.shift() as Echo;
    };
    return { transport, next, end, start };
  };
  return { process: process_, instance, revived };
}

describe("sharedProcess", () => {
  it("runs several instances in one process, each on its own socket", async () => {
    const { instance, process: child } = shared(2);
    const a = instance(0);
    const b = instance(1);
    a.transport.send({ op: "a" });
    b.transport.send({ op: "b" });
    const [fromA, fromB] = [await a.next(), await b.next()];
    expect([fromA.channel, fromB.channel]).toEqual([0, 1]);
    expect(fromA.pid).toBe(fromB.pid);
    // An idle instance ends alone: its socket closes; the other goes on in the same process.
    await a.transport.kill();
    expect(await a.end).toBe("was stopped");
    b.transport.send({ op: "again" });
    expect((await b.next()).pid).toBe(fromA.pid);
    // The last one ends the process.
    await b.transport.kill();
    expect(await b.end).toMatch(/exited with code 0|was killed by SIGTERM/);
    await child.close();
  });

  it("kill() of an instance in its model's code ends the process and every instance in it", async () => {
    const { instance } = shared(2);
    const a = instance(0);
    const b = instance(1);
    a.transport.send({ kind: "execute", batch: 1 });
    await a.next();
    await a.transport.kill();
    expect(await a.end).toMatch(/exited with code 0|was killed by SIGTERM/);
    expect(await b.end).toMatch(/exited with code 0|was killed by SIGTERM/);
  });

  it("a process that dies ends its instances; the next start spawns another and revives the others", async () => {
    const { instance, revived, process: child } = shared(2);
    const a = instance(0);
    const b = instance(1);
    a.transport.send({ op: "pid" });
    const { pid } = await a.next();
    a.transport.send({ op: "exit", code: 5 });
    expect(await a.end).toBe("exited with code 5");
    expect(await b.end).toBe("exited with code 5");
    const again = instance(0);
    again.transport.send({ op: "pid" });
    expect((await again.next()).pid).not.toBe(pid);
    await new Promise<void>((resolve) => queueMicrotask(resolve));
    expect(revived).toEqual([1]);
    await child.close();
    expect(await again.end).toMatch(/exited with code 0|was killed by SIGTERM/);
  });
});

describe("frameReader", () => {
  it("splits frames across and within chunks", () => {
    const bodies: string[] = [];
    const read = frameReader((b) => bodies.push(b.toString()));
    const all = Buffer.concat([encodeFrame({ a: 1 }), encodeFrame({ b: 2n }), encodeFrame("z")]);
    for (let i = 0; i < all.length; i += 3) expect(read(all.subarray(i, i + 3))).toBeUndefined();
    expect(bodies).toEqual(['{"a":1}', '{"b":"2"}', '"z"']);
  });

  it("refuses a frame past the limit", () => {
    const read = frameReader(() => undefined);
    const head = Buffer.alloc(4);
    head.writeUInt32LE(0xffffffff, 0);
    expect(read(head)).toMatch(/a frame of 4294967295 bytes/);
  });
});
