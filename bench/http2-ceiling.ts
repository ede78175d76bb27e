// The ceiling of node:http2 itself for ModelInfer-like traffic (issue 18's MLP gap): a server that
// reads each POST whole and answers as many bytes, doing nothing else, loaded by --procs processes
// of --callers streams each, with the flow-control settings Galley's gRPC listener uses. What it
// prints (requests/s, the server's CPU per request, its event loop's busy share) bounds what any
// server on one Node event loop can serve at that tensor size.
//
//   npx tsx bench/http2-ceiling.ts [--bytes=262144] [--procs=4] [--callers=16] [--seconds=3]
//   node build/gpu-carry/http2-ceiling.mjs --bytes=65536      # on the H200 (prepare-carry.sh bundles it)
import { fork } from "node:child_process";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";

const arg = (name: string, fallback: number) =>
  Number(process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? fallback);
const SESSION = { settings: { initialWindowSize: 16 << 20, maxFrameSize: (16 << 20) - 1 }, maxSessionMemory: 4096 };

interface Job {
  port: number;
  bytes: number;
  callers: number;
  ms: number;
}

if (process.env.GALLEY_H2_CEILING_CLIENT === "1") {
  process.once("message", (job: Job) => {
    const session = http2.connect(`http://127.0.0.1:${job.port}`, SESSION);
    session.once("connect", () => session.setLocalWindowSize(128 << 20));
    const body = Buffer.alloc(job.bytes + 5, 7);
    body[0] = 0;
    body.writeUInt32BE(job.bytes, 1);
    let done = 0;
    let live = job.callers;
    const end = Date.now() + job.ms;
    const one = () => {
      if (Date.now() > end) {
        if (--live === 0) {
          session.close();
          process.send?.({ done, cpu: process.cpuUsage() });
        }
        return;
      }
      const stream = session.request({ ":method": "POST", ":path": "/x", "content-type": "application/grpc" });
      stream.on("data", () => undefined);
      stream.on("close", () => {
        done++;
        one();
      });
      stream.end(body);
    };
    for (let i = 0; i < job.callers; i++) one();
  });
} else {
  const bytes = arg("bytes", 262144);
  const procs = arg("procs", 4);
  const callers = arg("callers", 16);
  const ms = arg("seconds", 3) * 1000;
  const server = http2.createServer(SESSION);
  server.on("session", (session) => session.setLocalWindowSize(128 << 20));
  server.on("stream", (stream) => {
    const chunks: Buffer[] = [];
    let total = 0;
    stream.on("data", (chunk: Buffer) => {
      total += chunk.byteLength;
      chunks.push(chunk);
    });
    stream.once("end", () => {
      const body = Buffer.concat(chunks, total);
      const out = Buffer.allocUnsafe(body.byteLength);
      body.copy(out);
      stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
      stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
      stream.end(out);
    });
  });
  server.listen(0, "127.0.0.1", async () => {
    const port = (server.address() as AddressInfo).port;
    const cpu = process.cpuUsage();
    const loop = performance.eventLoopUtilization();
    const results = await Promise.all(
      Array.from({ length: procs }, () => {
        const child = fork(fileURLToPath(import.meta.url), [], {
          execArgv: process.execArgv,
          env: { ...process.env, GALLEY_H2_CEILING_CLIENT: "1" },
        });
        child.send({ port, bytes, callers, ms } satisfies Job);
        return new Promise<{ done: number; cpu: NodeJS.CpuUsage }>((resolve) =>
          child.once("message", resolve as never),
        );
      }),
    );
    const used = process.cpuUsage(cpu);
    const busy = performance.eventLoopUtilization(loop).utilization;
    const calls = results.reduce((a, r) => a + r.done, 0);
    const clientUs = results.reduce((a, r) => a + r.cpu.user + r.cpu.system, 0);
    console.log(
      `http2 ceiling, ${bytes} B each way, ${procs} connections x ${callers} streams: ${(calls / (ms / 1000)).toFixed(0)} requests/s, ` +
        `server CPU ${((used.user + used.system) / calls).toFixed(0)} µs/request, event loop ${(busy * 100).toFixed(0)} % busy, ` +
        `clients' CPU ${(clientUs / calls).toFixed(0)} µs/request`,
    );
    server.close();
    process.exit(0);
  });
}
