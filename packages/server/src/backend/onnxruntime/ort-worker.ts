// Worker thread of one ONNX Runtime instance. A session's run is a synchronous native call, so it
// runs here, never on the server's event loop. Runs go through onnxruntime-node's raw binding
// (`openInlineSession`), synchronously, where it is there; otherwise through its public API.
import { type MessagePort, parentPort } from "node:worker_threads";
import ort from "onnxruntime-node";
import { type Coalesced, forEachMessage } from "../host/coalesce.js";
import { HotWait } from "../host/hot-wait.js";
import { inlineSessionsAvailable, openInlineSession } from "./inline-session.js";
import type {
  FromWorker,
  OrtProtocol,
  OrtResult,
  OrtType,
  SessionIO,
  ToWorker,
  ValueInfo,
  WireTensor,
} from "./ort-messages.js";

const port = parentPort as MessagePort | null;
if (!port) throw new Error("ort-worker must run in a worker thread");

/** A loaded session: runs synchronously (the raw binding) or through a promise (the public API). */
interface WorkerSession {
  io: SessionIO;
  run(feeds: readonly WireTensor[], fetches: readonly string[]): WireTensor[] | Promise<WireTensor[]>;
  release(): void | Promise<void>;
}

let session: WorkerSession | undefined;
/** Runs through the public API not finished: a stop releases the session only after them. */
const running = new Set<Promise<void>>();

function send(message: FromWorker, transfer: ArrayBuffer[] = []): void {
  port?.postMessage(message, transfer);
}

const hot = new HotWait(port, (message) => forEachMessage(message as ToWorker | Coalesced<ToWorker>, receive));

// A request that cannot be read would vanish and leave its caller waiting: crash instead, so the
// server fails what this instance holds.
port.on("messageerror", (error) => {
  throw new Error(`a message from the server could not be read: ${error.message}`);
});

port.on("message", (message: ToWorker | Coalesced<ToWorker>) => {
  forEachMessage(message, receive);
  hot.drain();
});

function receive(message: ToWorker): void {
  switch (message.kind) {
    case "start":
      void start(message.init);
      return;
    case "execute": {
      const caught = hot.arrived();
      const run = execute(message.batch, message.payload, caught);
      if (run) {
        running.add(run);
        void run.finally(() => running.delete(run));
      }
      return;
    }
    case "stop":
      hot.cancel();
      void stop();
      return;
    default:
      return;
  }
}

async function start(init: OrtProtocol["init"]): Promise<void> {
  try {
    session = inlineSessionsAvailable() ? openInlineSession(init.path, init.settings) : await openPublic(init);
    send({ kind: "started", info: session.io });
  } catch (error) {
    send({ kind: "start-failed", message: (error as Error).message });
  }
}

async function stop(): Promise<void> {
  await Promise.all(running);
  const current = session;
  session = undefined;
  try {
    await current?.release();
  } catch {
    // Released or not, the worker ends next.
  }
  send({ kind: "stopped" });
}

/** Run one batch and answer it; a promise only while a public-API run is in flight. */
function execute(batch: number, payload: OrtProtocol["batch"], caught: boolean): Promise<void> | undefined {
  const current = session;
  if (!current) {
    send({ kind: "executed", batch, result: { error: "session is not loaded" } });
    return undefined;
  }
  // Read outside the try: a batch that is not one is the server's fault, and ends the thread.
  const { feeds, fetches, hotWaitUs } = payload;
  const start = process.hrtime.bigint();
  let outputs: WireTensor[] | Promise<WireTensor[]>;
  try {
    outputs = current.run(feeds, fetches);
  } catch (error) {
    send({ kind: "executed", batch, result: { error: (error as Error).message } });
    return undefined;
  }
  if (!(outputs instanceof Promise)) {
    answer(batch, { outputs, inferNs: process.hrtime.bigint() - start, caught });
    hot.after(hotWaitUs);
    return undefined;
  }
  return outputs.then(
    (ready) => answer(batch, { outputs: ready, inferNs: process.hrtime.bigint() - start, caught }),
    (error: Error) => send({ kind: "executed", batch, result: { error: error.message } }),
  );
}

function answer(batch: number, result: OrtResult & { outputs: WireTensor[] }): void {
  const transfer: ArrayBuffer[] = [];
  for (const { data } of result.outputs) {
    if (!Array.isArray(data) && data.buffer instanceof ArrayBuffer && !transfer.includes(data.buffer)) {
      transfer.push(data.buffer);
    }
  }
  try {
    send({ kind: "executed", batch, result }, transfer);
  } catch {
    // Buffers the runtime owns cannot be transferred; they are copied instead.
    send({ kind: "executed", batch, result });
  }
}

/** The public API's session, where the raw binding is not there. */
async function openPublic(init: OrtProtocol["init"]): Promise<WorkerSession> {
  const loaded = await ort.InferenceSession.create(init.path, init.settings);
  return {
    io: { inputs: loaded.inputMetadata.map(info), outputs: loaded.outputMetadata.map(info) },
    async run(feeds, fetches) {
      const inputs: Record<string, ort.Tensor> = {};
      for (const t of feeds) inputs[t.name] = new ort.Tensor(t.type, t.data as ort.Tensor.DataType, t.dims);
      const results = await loaded.run(inputs, fetches);
      return fetches.flatMap((name) => {
        const tensor = results[name];
        return tensor
          ? [
              {
                name,
                type: tensor.type as OrtType,
                dims: [...tensor.dims],
                data: tensor.data as ArrayBufferView | string[],
              },
            ]
          : [];
      });
    },
    release: () => loaded.release(),
  };
}

function info(value: ort.InferenceSession.ValueMetadata): ValueInfo {
  return value.isTensor
    ? { name: value.name, type: value.type, shape: [...value.shape] }
    : { name: value.name, shape: [] };
}
