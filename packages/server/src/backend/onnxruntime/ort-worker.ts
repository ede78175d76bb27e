// Worker thread of one ONNX Runtime instance. onnxruntime-node's session.run is a synchronous
// native call, so it runs here, never on the server's event loop.
import { parentPort } from "node:worker_threads";
import ort from "onnxruntime-node";
import type { FromWorker, OrtType, ToWorker, ValueInfo, WireTensor } from "./ort-messages.js";

const port = parentPort;
if (!port) throw new Error("ort-worker must run in a worker thread");

let session: ort.InferenceSession | undefined;

function send(message: FromWorker, transfer: ArrayBuffer[] = []): void {
  port?.postMessage(message, transfer);
}

// A request that cannot be read would vanish and leave its caller waiting: crash instead, so the
// server fails what this instance holds.
port.on("messageerror", (error) => {
  throw new Error(`a message from the server could not be read: ${error.message}`);
});

port.on("message", async (message: ToWorker) => {
  if (message.kind === "load") {
    try {
      session = await ort.InferenceSession.create(message.path, message.settings);
      send({ kind: "loaded", inputs: session.inputMetadata.map(info), outputs: session.outputMetadata.map(info) });
    } catch (error) {
      send({ kind: "error", message: (error as Error).message });
    }
    return;
  }
  const current = session;
  if (!current) {
    send({ kind: "error", id: message.id, message: "session is not loaded" });
    return;
  }
  try {
    const feeds: Record<string, ort.Tensor> = {};
    for (const t of message.feeds) {
      feeds[t.name] = new ort.Tensor(t.type, t.data as ort.Tensor.DataType, t.dims);
    }
    const start = process.hrtime.bigint();
    const results = await current.run(feeds, message.fetches);
    const inferNs = process.hrtime.bigint() - start;
    const outputs: WireTensor[] = [];
    const transfer: ArrayBuffer[] = [];
    for (const name of message.fetches) {
      const tensor = results[name];
      if (!tensor) continue;
      const data = tensor.data as ArrayBufferView | string[];
      outputs.push({ name, type: tensor.type as OrtType, dims: [...tensor.dims], data });
      if (!Array.isArray(data) && data.buffer instanceof ArrayBuffer && !transfer.includes(data.buffer)) {
        transfer.push(data.buffer);
      }
    }
    try {
      send({ kind: "result", id: message.id, outputs, inferNs }, transfer);
    } catch {
      // Buffers the runtime owns cannot be transferred; they are copied instead.
      send({ kind: "result", id: message.id, outputs, inferNs });
    }
  } catch (error) {
    send({ kind: "error", id: message.id, message: (error as Error).message });
  }
});

function info(value: ort.InferenceSession.ValueMetadata): ValueInfo {
  return value.isTensor
    ? { name: value.name, type: value.type, shape: [...value.shape] }
    : { name: value.name, shape: [] };
}
