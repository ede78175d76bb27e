import type { InferenceError, TritonCode } from "../../base/errors.js";

/** HTTP status per Triton code (Triton's `HttpCodeFromError`, PROTOCOL.md §1.1). */
export const HTTP_STATUS: Readonly<Record<TritonCode, number>> = {
  INTERNAL: 500,
  NOT_FOUND: 404,
  UNAVAILABLE: 503,
  UNSUPPORTED: 501,
  UNKNOWN: 400,
  INVALID_ARG: 400,
  ALREADY_EXISTS: 400,
  CANCELLED: 400,
};

/** The HTTP status an error is answered with: the table's own for an HTTP-only answer, else its code's. */
export function httpStatus(error: InferenceError): number {
  return error.httpStatusOverride ?? HTTP_STATUS[error.code];
}
