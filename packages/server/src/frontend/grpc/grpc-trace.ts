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

  /** `read`: when the frontend started and finished reading the request (none when connect-node read it). */
  constructor(
    readonly trace: Trace,
    read?: readonly [startNs: bigint, endNs: bigint],
  ) {
    if (read) this.#marks.push(["GRPC_WAITREAD_START", read[0]], ["GRPC_WAITREAD_END", read[1]]);
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
