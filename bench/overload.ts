// Overload (issue 45, item 8): N keep-alive connections opened at once, each sending `simple`
// REST JSON requests back to back for a while, against Galley (this checkout, and `--before=` a
// worktree of an earlier build) and the hand-written server, one at a time. Per server: requests/s,
// latency percentiles, and apart the first request of each connection, which waits in the
// kernel's accept queue until the server's event loop polls (libuv accepts one connection a poll).
// The ratio printed: Galley's worst first request / the hand-written server's, in the same run.
//
//   npx tsx bench/overload.ts [--connections=1000] [--seconds=8] [--reps=2] [--before=/tmp/before]
import { connect } from "node:net";
import { type Child, startChild } from "./lib/ipc.js";
import { GALLEY_SERVE_NODE_FLAGS, machineLine, option, textOption } from "./lib/setup.js";
import { median, percentile, table } from "./lib/stats.js";

const connections = option("connections", 1000);
const seconds = option("seconds", 8);
const reps = option("reps", 2);
const before = textOption("before", "");

const BODY = JSON.stringify({
  inputs: [
    { name: "INPUT0", shape: [1, 16], datatype: "INT32", data: Array.from({ length: 16 }, (_, i) => i) },
    { name: "INPUT1", shape: [1, 16], datatype: "INT32", data: Array.from({ length: 16 }, () => 1) },
  ],
});
const REQUEST = Buffer.from(
  `POST /v2/models/simple/infer HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: ${BODY.length}\r\n\r\n${BODY}`,
);

interface Storm {
  requests: number;
  failed: number;
  later: number[];
  first: number[];
}

/** Open `connections` at once to `port`; each sends a request whenever its last answer is whole. */
function storm(port: number): Promise<Storm> {
  const result: Storm = { requests: 0, failed: 0, later: [], first: [] };
  const end = performance.now() + seconds * 1000;
  let open = connections;
  return new Promise((resolve) => {
    for (let i = 0; i < connections; i++) {
      const socket = connect(port, "127.0.0.1");
      socket.setNoDelay(true);
      let received: Buffer = Buffer.alloc(0);
      let sentAt = 0;
      let first = true;
      const send = () => {
        if (performance.now() > end) {
          socket.destroy();
          return;
        }
        sentAt = performance.now();
        socket.write(REQUEST);
      };
      socket.on("connect", send);
      socket.on("data", (chunk: Buffer) => {
        received = received.length === 0 ? chunk : Buffer.concat([received, chunk]);
        for (;;) {
          const headEnd = received.indexOf("\r\n\r\n");
          if (headEnd < 0) return;
          const head = received.subarray(0, headEnd).toString("latin1");
          // The hand-written server's answers are chunked (writeHead with headers, then end).
          let end: number;
          if (/\r\ntransfer-encoding: *chunked/i.test(head)) {
            const last = received.indexOf("\r\n0\r\n\r\n", headEnd + 4);
            if (last < 0) return;
            end = last + 7;
          } else {
            end = headEnd + 4 + Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
            if (received.length < end) return;
          }
          if (!head.startsWith("HTTP/1.1 200")) result.failed++;
          received = received.subarray(end);
          result.requests++;
          (first ? result.first : result.later).push(performance.now() - sentAt);
          first = false;
          send();
        }
      });
      socket.on("error", () => {
        result.failed++;
      });
      socket.on("close", () => {
        if (--open === 0) resolve(result);
      });
    }
  });
}

const max = (values: readonly number[]) => values.reduce((a, b) => Math.max(a, b), 0);

type Ready = { http: number; pid: number };
const servers = new Map<string, () => Promise<Child<Ready>>>();
const served = { NODE_OPTIONS: GALLEY_SERVE_NODE_FLAGS.join(" ") };
const galley = new URL("./lib/galley-build-process.ts", import.meta.url);
servers.set("hand-written", () => startChild<Ready>(new URL("./lib/hand-written-simple-process.ts", import.meta.url)));
if (before) servers.set("before", () => startChild<Ready>(galley, [before], served));
servers.set("after", () => startChild<Ready>(galley, ["current"], served));

console.log(machineLine());
console.log(`${connections} connections opened at once, ${seconds} s each, ${reps} repetitions\n`);
const rows: string[][] = [];
const worstFirst = new Map<string, number[]>();
for (let rep = 0; rep < reps; rep++) {
  for (const [name, start] of servers) {
    // A fresh process each time: its first turns with a thousand connections are what is measured.
    const child = await start();
    const s = await storm(child.ready.http);
    await child.stop();
    const all = [...s.first, ...s.later];
    const ms = (v: number) => v.toFixed(0);
    worstFirst.set(name, [...(worstFirst.get(name) ?? []), max(s.first)]);
    rows.push([
      name,
      String(rep + 1),
      String(Math.round(s.requests / seconds)),
      String(s.failed),
      ms(percentile(all, 50)),
      ms(percentile(all, 99)),
      ms(percentile(all, 99.9)),
      ms(max(s.later)),
      ms(max(s.first)),
      String(s.first.filter((v) => v > 1000).length),
    ]);
  }
}
console.log(
  table(
    ["server", "rep", "req/s", "failed", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "first max ms", "first > 1 s"],
    rows,
  ),
);
const base = median(worstFirst.get("hand-written") ?? []);
for (const name of servers.keys())
  if (name !== "hand-written")
    console.log(
      `${name}: worst first request / hand-written's = ${(median(worstFirst.get(name) ?? []) / base).toFixed(2)}`,
    );
