// Which of the server's files and folders one inference runs through (issue 46's "a REST request
// crosses N files"): Galley from a build (`--build=<checkout>`, a worktree with packages/server
// built; default this checkout) serves `simple` in this process; V8's precise coverage counts the
// functions that run for one warm REST JSON request and one warm gRPC ModelInfer (raw sockets and
// an HTTP/2 session, so that no client code of Galley's is counted), and the files and folders of
// packages/server and proto they belong to are printed, with the pipeline's order of first calls
// unknown (coverage has none): folders are counted, not crossings.
//
//   npx tsx bench/request-path.ts [--build=/tmp/before]
import { connect as connectHttp2 } from "node:http2";
import { Session } from "node:inspector/promises";
import { connect } from "node:net";
import { dirname, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { create, toBinary } from "@bufbuild/protobuf";
import { ModelInferRequestSchema } from "@galley/proto";
import { importGalley, simpleServer } from "./lib/galley-build.js";
import { textOption } from "./lib/setup.js";
import { INPUT0, INPUT1, MODEL } from "./lib/simple.js";

const build = textOption("build", "current");
const root = build === "current" ? fileURLToPath(new URL("..", import.meta.url)) : build;
const server = simpleServer(await importGalley(build));
const { http, grpc } = await server.listen();

const body = JSON.stringify({
  inputs: [
    { name: "INPUT0", shape: [1, 16], datatype: "INT32", data: [...INPUT0] },
    { name: "INPUT1", shape: [1, 16], datatype: "INT32", data: [...INPUT1] },
  ],
});
const rest = Buffer.from(
  `POST /v2/models/${MODEL}/infer HTTP/1.1\r\nHost: bench\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
);
const socket = connect(http?.port ?? 0, "127.0.0.1");
await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
function restOnce(): Promise<void> {
  return new Promise((resolve) => {
    let text = "";
    const onData = (chunk: Buffer) => {
      text += chunk.toString("latin1");
      const end = text.indexOf("\r\n\r\n");
      const length = Number(/content-length: (\d+)/i.exec(text)?.[1] ?? -1);
      if (end >= 0 && text.length >= end + 4 + length) {
        socket.off("data", onData);
        resolve();
      }
    };
    socket.on("data", onData);
    socket.write(rest);
  });
}

const message = toBinary(
  ModelInferRequestSchema,
  create(ModelInferRequestSchema, {
    modelName: MODEL,
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: [1n, 16n] },
      { name: "INPUT1", datatype: "INT32", shape: [1n, 16n] },
    ],
    rawInputContents: [new Uint8Array(INPUT0.buffer), new Uint8Array(INPUT1.buffer)],
  }),
);
const frame = Buffer.alloc(5 + message.length);
frame.writeUInt32BE(message.length, 1);
frame.set(message, 5);
const session = connectHttp2(`http://127.0.0.1:${grpc?.port ?? 0}`);
function grpcOnce(): Promise<void> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": "/inference.GRPCInferenceService/ModelInfer",
      "content-type": "application/grpc",
      te: "trailers",
    });
    stream.on("data", () => {});
    stream.on("trailers", (trailers) =>
      trailers["grpc-status"] === "0" ? resolve() : reject(new Error(String(trailers["grpc-message"]))),
    );
    stream.end(frame);
  });
}

const inspector = new Session();
inspector.connect();
await inspector.post("Profiler.enable");
await inspector.post("Profiler.startPreciseCoverage", { callCount: true, detailed: false });

/** The server's files (under packages/server and proto) whose functions ran for one call of `once`, warm. */
async function pathOf(once: () => Promise<void>): Promise<string[]> {
  for (let i = 0; i < 200; i++) await once();
  await inspector.post("Profiler.takePreciseCoverage");
  await once();
  const { result } = await inspector.post("Profiler.takePreciseCoverage");
  const files = new Set<string>();
  for (const script of result) {
    if (!script.url.startsWith("file://")) continue;
    const path = relative(root, fileURLToPath(script.url));
    if (!/^(packages\/server|proto)\//.test(path)) continue;
    if (script.functions.some((f) => f.ranges.some((r) => r.count > 0))) files.add(path);
  }
  return [...files].sort();
}

for (const [name, once] of [
  ["REST JSON infer", restOnce],
  ["gRPC ModelInfer", grpcOnce],
] as const) {
  const files = await pathOf(once);
  const folders = new Set(files.map((f) => dirname(f)));
  console.log(`${name} (${build}): ${files.length} files in ${folders.size} folders`);
  for (const file of files) console.log(`  ${file}`);
}
await inspector.post("Profiler.stopPreciseCoverage");
inspector.disconnect();
socket.destroy();
session.close();
await server.close();
