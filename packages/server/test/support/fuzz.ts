// Shared oracle of the frontend fuzz tests: a decoder given any input either succeeds or throws an
// InferenceError from the error table; it never throws anything else and never hangs.
import vm from "node:vm";
import { ERRORS, InferenceError } from "../../src/base/errors.js";

/** Longer than any decode may take; a decode still running then is a hang and fails the test. */
const HANG_MS = 2_000;

const sandbox = vm.createContext({ run: undefined as (() => unknown) | undefined, result: undefined as unknown });
const script = new vm.Script("result = run()");

/**
 * Run `decode` (synchronous) and return what it returned, or the InferenceError it threw. Throws
 * (failing the property) when it throws anything else, an error with an id or code outside the
 * table, or runs past {@link HANG_MS}: vitest's timeout cannot stop a synchronous loop, node:vm's can.
 */
export function decodeOrTableError<T>(decode: () => T, show: () => string): T | InferenceError {
  sandbox.run = decode;
  sandbox.result = undefined;
  try {
    script.runInContext(sandbox, { timeout: HANG_MS });
    return sandbox.result as T;
  } catch (error) {
    if ((error as { code?: string }).code === "ERR_SCRIPT_EXECUTION_TIMEOUT") {
      throw new Error(`decoding hung (> ${HANG_MS} ms) on ${show()}`);
    }
    if (!(error instanceof InferenceError)) {
      throw new Error(`decoding threw ${String(error)}, not an InferenceError, on ${show()}`, { cause: error });
    }
    const entry = ERRORS[error.id];
    if (!entry || error.code !== entry[0] || error.message === "" || error.id === "INTERNAL_ERROR") {
      throw new Error(`decoding threw an error outside the table (${error.id}: ${error.message}) on ${show()}`);
    }
    return error;
  } finally {
    sandbox.run = undefined;
  }
}

/** An input for a failure message, cut to a readable length. */
export function showBytes(bytes: Uint8Array): string {
  const hex = Buffer.from(bytes.subarray(0, 200)).toString("hex");
  return `${bytes.length} bytes ${hex}${bytes.length > 200 ? "…" : ""}`;
}
