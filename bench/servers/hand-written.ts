// The server a user would write instead of Galley: node:http, a JSON body, one session.run per
// request, a JSON reply. It accepts the same KServe v2 JSON request as Galley's REST frontend.
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import ort from "onnxruntime-node";
import { INFER_PATH, MODEL, MODEL_FILE } from "../lib/simple.js";
import type { BenchServer } from "./server.js";

interface JsonTensor {
  name: string;
  shape: number[];
  datatype: string;
  data: number[];
}

export async function startHandWritten(): Promise<BenchServer> {
  const session = await ort.InferenceSession.create(MODEL_FILE);
  const server = createServer(async (req, res) => {
    if (req.method !== "POST" || req.url !== INFER_PATH) {
      res.writeHead(404).end();
      return;
    }
    try {
      const body = JSON.parse(await readBody(req)) as { inputs: JsonTensor[] };
      const feeds: Record<string, ort.Tensor> = {};
      for (const input of body.inputs)
        feeds[input.name] = new ort.Tensor("int32", Int32Array.from(input.data), input.shape);
      const results = await session.run(feeds);
      const outputs = Object.entries(results).map(([name, tensor]) => ({
        name,
        datatype: "INT32",
        shape: tensor.dims,
        data: Array.from(tensor.data as Int32Array),
      }));
      const reply = JSON.stringify({ model_name: MODEL, model_version: "1", outputs });
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
      await session.release();
    },
  };
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}
