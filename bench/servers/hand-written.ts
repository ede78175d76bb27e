// The server a user would write instead of Galley: node:http, a JSON body, one session.run per
// request, a JSON reply. It accepts the same KServe v2 JSON request as Galley's REST frontend
// (`data` a flat array of numbers), for each model it is given (`simple`'s INT32, the identity's FP32).
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import ort from "onnxruntime-node";
import type { Workload } from "../lib/workload.js";
import type { BenchServer } from "./server.js";

interface JsonTensor {
  name: string;
  shape: number[];
  datatype: string;
  data: number[];
}

/** A JSON input as an onnxruntime tensor. */
function tensorOf(input: JsonTensor): ort.Tensor {
  switch (input.datatype) {
    case "INT32":
      return new ort.Tensor("int32", Int32Array.from(input.data), input.shape);
    case "FP32":
      return new ort.Tensor("float32", Float32Array.from(input.data), input.shape);
    default:
      throw new Error(`unsupported datatype ${input.datatype}`);
  }
}

const DATATYPES: Record<string, string> = { int32: "INT32", float32: "FP32" };

export async function startHandWritten(workloads: readonly Workload[]): Promise<BenchServer> {
  // One session per model, by its infer path.
  const sessions = new Map<string, { model: string; session: ort.InferenceSession }>();
  for (const { model, path, modelFile } of workloads)
    sessions.set(path, { model, session: await ort.InferenceSession.create(modelFile) });
  const server = createServer(async (req, res) => {
    const served = req.method === "POST" ? sessions.get(req.url ?? "") : undefined;
    if (!served) {
      res.writeHead(404).end();
      return;
    }
    try {
      const body = JSON.parse(await readBody(req)) as { inputs: JsonTensor[] };
      const feeds: Record<string, ort.Tensor> = {};
      for (const input of body.inputs) feeds[input.name] = tensorOf(input);
      const results = await served.session.run(feeds);
      const outputs = Object.entries(results).map(([name, tensor]) => ({
        name,
        datatype: DATATYPES[tensor.type],
        shape: tensor.dims,
        data: Array.from(tensor.data as Int32Array | Float32Array),
      }));
      const reply = JSON.stringify({ model_name: served.model, model_version: "1", outputs });
      res.writeHead(200, { "content-type": "application/json" }).end(reply);
    } catch (error) {
      res.writeHead(400, { "content-type": "application/json" }).end(JSON.stringify({ error: String(error) }));
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    ports: { http: (server.address() as AddressInfo).port },
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      for (const { session } of sessions.values()) await session.release();
    },
  };
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}
