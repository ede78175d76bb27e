// Child entry: the hand-written server (servers/hand-written.ts: node:http, JSON, one session.run
// per request with onnxruntime-node's default options) serving the MLP file in argv[2] as `mlp`.
// Reports its HTTP port; its only job answers this process's CPU time (µs, all threads).
import { startHandWritten } from "../servers/hand-written.js";
import { serveJobs } from "./ipc.js";

const modelFile = process.argv[2];
if (!modelFile) throw new Error("usage: hand-written-mlp-process <model.onnx>");
const server = await startHandWritten([
  { model: "mlp", path: "/v2/models/mlp/infer", repository: "", modelFile, inputs: [], outputs: [] },
]);
const cpu = () => {
  const { user, system } = process.cpuUsage();
  return user + system;
};
serveJobs(server.ports, async () => cpu(), server.close);
