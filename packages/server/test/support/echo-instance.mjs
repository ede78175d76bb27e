// A model instance for the instance host's tests, in a worker thread, speaking the host's
// protocol (backend/host/host-messages.ts). `init`: { failIfExists?: path (start fails while that
// file exists), hang?: never answer start, ignoreStop?: never answer stop }. A batch is
// { op: "echo", value } | { op: "stream", key, n } | { op: "wait-cancel", key } | { op: "exit", code } | { op: "hang" }.
import { existsSync } from "node:fs";
import { parentPort, threadId } from "node:worker_threads";

const port = parentPort;
let init = {};
/** Requests waiting for their cancel, by key. */
const waiting = new Set();

port.on("message", (message) => {
  switch (message.kind) {
    case "start":
      init = message.init;
      if (init.hang) return;
      if (init.failIfExists && existsSync(init.failIfExists)) {
        port.postMessage({ kind: "start-failed", message: "the flag file exists" });
        return;
      }
      port.postMessage({ kind: "started", info: { threadId } });
      return;
    case "execute":
      execute(message.batch, message.payload);
      return;
    case "cancel":
      if (waiting.delete(message.key)) {
        port.postMessage({ kind: "response", key: message.key, response: "cancelled", final: true });
      }
      return;
    case "stop":
      if (!init.ignoreStop) port.postMessage({ kind: "stopped" });
      return;
    case "ping":
      port.postMessage({ kind: "pong", value: message.value });
      return;
  }
});

function execute(batch, payload) {
  switch (payload.op) {
    case "echo":
      port.postMessage({ kind: "executed", batch, result: payload.value });
      return;
    case "stream":
      for (let i = 0; i < payload.n; i++)
        port.postMessage({ kind: "response", key: payload.key, response: i, final: false });
      port.postMessage({ kind: "response", key: payload.key, final: true });
      port.postMessage({ kind: "executed", batch, result: "streamed" });
      return;
    case "wait-cancel":
      waiting.add(payload.key);
      port.postMessage({ kind: "executed", batch, result: "waiting" });
      return;
    case "exit":
      process.exit(payload.code);
      return;
    case "hang":
      return;
  }
}
