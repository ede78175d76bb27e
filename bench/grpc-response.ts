// What writing one ModelInfer response costs the gRPC frontend, before the bytes reach
// node:http2: protobuf-es (`create` + `toBinary`, as connect-node and the streaming path write
// it) against the lean head the unary path writes (frontend/grpc/lean-wire.ts `responsePieces`),
// for `simple`'s response (two INT32 [1,16] outputs), in this process, interleaved.
//
//   npx tsx bench/grpc-response.ts [--reps=5] [--calls=200000]
import { loadavg } from "node:os";
import { responseToGrpc } from "../packages/server/src/frontend/grpc/grpc-codec.js";
import { inferResponsePieces, responsePieces } from "../packages/server/src/frontend/grpc/lean-wire.js";
import { option } from "./lib/setup.js";
import { formatSpread, spread, table } from "./lib/stats.js";

const reps = option("reps", 5);
const calls = option("calls", 200_000);
const response = () => ({
  modelName: "simple",
  modelVersion: "1",
  id: "",
  parameters: {},
  outputs: ["OUTPUT0", "OUTPUT1"].map((name) => ({
    name,
    datatype: "INT32" as const,
    shape: [1, 16],
    data: new Uint8Array(64),
    parameters: {},
  })),
});
const ways = {
  "protobuf-es (create + toBinary)": () => inferResponsePieces(responseToGrpc(response())).length,
  "lean head (responsePieces)": () => responsePieces(response()).length,
};
const results = new Map<string, number[]>();
for (let rep = -1; rep < reps; rep++) {
  for (const [name, write] of Object.entries(ways)) {
    let bytes = 0;
    const start = process.hrtime.bigint();
    for (let i = 0; i < calls; i++) bytes += write();
    const us = Number(process.hrtime.bigint() - start) / calls / 1000;
    if (bytes !== calls * 187) throw new Error(`${name}: ${bytes / calls} bytes a response, expected 187`);
    if (rep >= 0) results.set(name, [...(results.get(name) ?? []), us]);
  }
}
console.log(`node ${process.version}, load average ${loadavg()[0]?.toFixed(2)}; ${reps} × ${calls} responses each`);
console.log(
  table(
    ["way", "µs per response"],
    [...results].map(([name, v]) => [name, formatSpread(spread(v), 2)]),
  ),
);
