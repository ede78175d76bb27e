// The messages between an instance host (main thread) and the model instance it runs, whatever
// carries them (a worker thread's port today; a child process's pipe later). A backend names its
// own payloads through an InstanceProtocol and may add messages of its own kinds.

/**
 * What one backend's instances exchange with their host: the payload of each host message, and
 * the backend's own messages each way (their `kind`s must differ from the host's).
 */
export interface InstanceProtocol {
  /** What an instance is started with (at first, and at every restart). */
  init: unknown;
  /** What an instance reports once started (an ONNX session's inputs and outputs). */
  info: unknown;
  /** One batch to execute. */
  batch: unknown;
  /** The instance's answer to a batch. */
  result: unknown;
  /** One response of a request that answers several times (a decoupled model). */
  response: unknown;
  /** The backend's own messages to the instance. */
  toInstance: { kind: string };
  /** The backend's own messages from the instance. */
  fromInstance: { kind: string };
}

/** From the host to the instance. */
export type HostToInstance<P extends InstanceProtocol> =
  | { kind: "start"; init: P["init"] }
  | { kind: "execute"; batch: number; payload: P["batch"] }
  /** The request `key` was cancelled by its client. */
  | { kind: "cancel"; key: number }
  /** Finish (a scripted model's `finalize`) and answer `stopped`; the host then ends the instance. */
  | { kind: "stop" }
  | P["toInstance"];

/** From the instance to the host. */
export type InstanceToHost<P extends InstanceProtocol> =
  | { kind: "started"; info: P["info"] }
  /** The instance could not start: `message` is the model's or runtime's own text. */
  | { kind: "start-failed"; message: string }
  | { kind: "executed"; batch: number; result: P["result"] }
  /** A response for the request `key`; `final` ends it. */
  | { kind: "response"; key: number; response?: P["response"]; final: boolean }
  | { kind: "stopped" }
  | P["fromInstance"];
