// Worker thread of one ONNX Runtime instance. onnxruntime-node's session.run is a synchronous
// native call, so it runs here, never on the server's event loop.
import { parentPort } from "node:worker_threads";
import ort from "onnxruntime-node";
import { type Coalesced, forEachMessage } from "../host/coalesce.js";
import type { FromWorker, OrtProtocol, OrtResult, OrtType, ToWorker, ValueInfo, WireTensor } from "./ort-messages.js";

const port = parentPort;
if (!port) throw new Error("ort-worker must run in a worker thread");

let session: ort.InferenceSession | undefined;
/** Runs not finished: a stop releases the session only after them. */
const running = new Set<Promise<void>>();

function send(message: FromWorker, transfer: ArrayBuffer[] = []): void {
  port?.postMessage(message, transfer);
}

// A request that cannot be read would vanish and leave its caller waiting: crash instead, so the
// server fails what this instance holds.
port.on("messageerror", (error) => {
  throw new Error(`a message from the server could not be read: ${error.message}`);
});

port.on("message", (message: ToWorker | Coalesced<ToWorker>) => forEachMessage(message, (one) => void receive(one)));

async function receive(message: ToWorker): Promise<void> {
  switch (message.kind) {
    case "start":
      try {
        session = await ort.InferenceSession.create(message.init.path, message.init.settings);
        send({
          kind: "started",
          info: { inputs: session.inputMetadata.map(info), outputs: session.outputMetadata.map(info) },
        });
      } catch (error) {
        send({ kind: "start-failed", message: (error as Error).message });
      }
      return;
    case "execute": {
      const run = execute(message.batch, message.payload);
      running.add(run);
      await run;
      running.delete(run);
      return;
    }
    case "stop":
      await Promise.all(running);
      await session?.release().catch(() => undefined);
      session = undefined;
      send({ kind: "stopped" });
      return;
    default:
      return;
  }
}

async function execute(batch: number, { feeds, fetches }: OrtProtocol["batch"]): Promise<void> {
  const current = session;
  if (!current) {
    send({ kind: "executed", batch, result: { error: "session is not loaded" } });
    return;
  }
  let result: OrtResult;
  const transfer: ArrayBuffer[] = [];
  try {
    const inputs: Record<string, ort.Tensor> = {};
    for (const t of feeds) inputs[t.name] = new ort.Tensor(t.type, t.data as ort.Tensor.DataType, t.dims);
    const start = process.hrtime.bigint();
    const results = await current.run(inputs, fetches);
    const inferNs = process.hrtime.bigint() - start;
    const outputs: WireTensor[] = [];
    for (const name of fetches) {
      const tensor = results[name];
      if (!tensor) continue;
      const data = tensor.data as ArrayBufferView | string[];
      outputs.push({ name, type: tensor.type as OrtType, dims: [...tensor.dims], data });
      if (!Array.isArray(data) && data.buffer instanceof ArrayBuffer && !transfer.includes(data.buffer)) {
        transfer.push(data.buffer);
      }
    }
    result = { outputs, inferNs };
  } catch (error) {
    send({ kind: "executed", batch, result: { error: (error as Error).message } });
    return;
  }
  try {
    send({ kind: "executed", batch, result }, transfer);
  } catch {
    // Buffers the runtime owns cannot be transferred; they are copied instead.
    send({ kind: "executed", batch, result });
  }
}

function info(value: ort.InferenceSession.ValueMetadata): ValueInfo {
  return value.isTensor
    ? { name: value.name, type: value.type, shape: [...value.shape] }
    : { name: value.name, shape: [] };
}
