import { now } from "../../base/clock.js";
import type { Trace } from "../../base/trace.js";

/**
 * A gRPC request's trace. As Triton's gRPC frontend does, its own timestamps (GRPC_WAITREAD_*,
 * INFER_RESPONSE_COMPLETE for the first response, GRPC_SEND_* for each write) are kept here and
 * written after the core's when the request ends.
 */
export class GrpcTrace {
  readonly #marks: [string, bigint][] = [];
  #responded = false;
  #ended = false;

  constructor(
    readonly trace: Trace,
    waitReadStartNs: bigint,
    waitReadEndNs: bigint,
  ) {
    this.#marks.push(["GRPC_WAITREAD_START", waitReadStartNs], ["GRPC_WAITREAD_END", waitReadEndNs]);
  }

  /** A response is complete; the first one is INFER_RESPONSE_COMPLETE. */
  responded(): void {
    if (this.#responded) return;
    this.#responded = true;
    this.mark("INFER_RESPONSE_COMPLETE");
  }

  mark(name: string, ns: bigint = now()): void {
    this.#marks.push([name, ns]);
  }

  /** Write the frontend's timestamps and end the trace. Idempotent. */
  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    for (const [name, ns] of this.#marks) this.trace.capture(name, ns);
    this.trace.end();
  }
}
