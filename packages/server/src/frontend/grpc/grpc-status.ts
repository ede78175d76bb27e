import { Code, ConnectError } from "@connectrpc/connect";
import { hiddenCause, InferenceError, type TritonCode, toInferenceError } from "../../base/errors.js";
import type { Logger } from "../../base/log.js";

/** gRPC status per Triton code (PROTOCOL.md §2.3). */
export const GRPC_CODE: Readonly<Record<TritonCode, Code>> = {
  UNKNOWN: Code.Unknown,
  INTERNAL: Code.Internal,
  NOT_FOUND: Code.NotFound,
  INVALID_ARG: Code.InvalidArgument,
  UNAVAILABLE: Code.Unavailable,
  UNSUPPORTED: Code.Unimplemented,
  ALREADY_EXISTS: Code.AlreadyExists,
  CANCELLED: Code.Canceled,
};

/** A gRPC status to answer with (code and message), for failures below the core (framing, compression, deadlines). */
export class GrpcStatus extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/** The gRPC status code an error is answered with. */
export function grpcCode(error: InferenceError): Code {
  return GRPC_CODE[error.code];
}

/**
 * Turn an `InferenceError` (or anything thrown) into the gRPC status Triton answers with. A
 * request connect-node could not decode is INVALID_ARGUMENT; what is not an InferenceError is
 * answered without its JavaScript text (see {@link toInferenceError}) and, with `log`, logged.
 */
export function grpcError(error: unknown, log?: Logger): ConnectError {
  if (error instanceof ConnectError && !error.rawMessage.startsWith("parse binary: ")) return error;
  const failure =
    error instanceof ConnectError
      ? new InferenceError("GRPC_BAD_MESSAGE", { message: "request", detail: "not a valid protobuf encoding" })
      : toInferenceError(error);
  const hidden = hiddenCause(failure);
  if (hidden !== undefined) log?.error(`gRPC: ${hidden}`);
  return new ConnectError(failure.message, grpcCode(failure));
}

/**
 * The same for a lean call (`lean-calls.ts`), which writes its status itself: a {@link GrpcStatus}
 * as it is, anything else as {@link grpcError} maps it, what it hides logged with the RPC's name.
 */
export function callStatus(error: unknown, log: Logger, rpc: string): { code: number; message: string } {
  if (error instanceof GrpcStatus) return error;
  const failure = toInferenceError(error);
  const hidden = hiddenCause(failure);
  if (hidden !== undefined) log.error(`gRPC ${rpc}: ${hidden}`);
  return { code: grpcCode(failure), message: failure.message };
}
