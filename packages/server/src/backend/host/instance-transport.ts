/** What a transport reports about the instance it carries messages for. */
export interface TransportEvents<In> {
  message(message: In): void;
  /**
   * The instance is gone (it crashed, exited, was killed, or sent what cannot be read); `reason`
   * says so in a few words (`exited with code 4`). Reported once, after `kill()` too.
   * `lostThread`: it went with a shared thread that something else on it ended, so a start in
   * progress is worth one more try.
   */
  ended(reason: string, lostThread?: boolean): void;
}

/**
 * The place one model instance runs, seen from the host: a worker thread today, a child process
 * (Triton's Python backend) or a native thread pool later. It only carries messages and reports
 * the instance's end; supervision (restarts, timeouts, failing what is in flight) is the host's.
 */
export interface InstanceTransport<Out> {
  /** Deliver a message; `transfer` buffers move instead of being copied where the transport can. */
  send(message: Out, transfer?: readonly ArrayBuffer[]): void;
  /** End the instance now; `ended` follows unless it was already reported. */
  kill(): Promise<void>;
}

/** Starts a fresh place to run the instance (called at the start and at every restart). */
export type TransportFactory<Out, In> = (events: TransportEvents<In>) => InstanceTransport<Out>;
