import { describe, expect, it } from "vitest";
import { backendError, ECHO_LIMIT, hiddenCause, InferenceError, TEXT_ECHO_LIMIT, toInferenceError } from "./errors.js";

describe("toInferenceError", () => {
  it("keeps an InferenceError as it is", () => {
    const error = new InferenceError("MODEL_NOT_FOUND", { model: "m" });
    expect(toInferenceError(error)).toBe(error);
    expect(hiddenCause(error)).toBeUndefined();
  });

  it("passes on a plain Error's message, written for people, as INTERNAL: not a backend's failure", () => {
    const failure = toInferenceError(new Error("refusing to remove '/x': not a folder of file overrides"));
    expect([failure.id, failure.code, failure.message]).toEqual([
      "UNCLASSIFIED",
      "INTERNAL",
      "refusing to remove '/x': not a folder of file overrides",
    ]);
    expect(hiddenCause(failure)).toBeUndefined();
  });

  it("makes what a backend raised a BACKEND_FAILED with its text (backendError)", () => {
    const failure = backendError(new Error("onnx runtime error 2: bad input"));
    expect([failure.id, failure.code, failure.message]).toEqual([
      "BACKEND_FAILED",
      "INTERNAL",
      "onnx runtime error 2: bad input",
    ]);
    const known = new InferenceError("MODEL_NOT_FOUND", { model: "m" });
    expect(backendError(known)).toBe(known);
    expect(backendError(new TypeError("x is not a function")).id).toBe("INTERNAL_ERROR");
  });

  it("hides the engine's errors, Node's coded errors and thrown non-errors behind INTERNAL_ERROR", () => {
    let bigint: unknown;
    try {
      BigInt(-2.5);
    } catch (error) {
      bigint = error;
    }
    const thrown = [
      bigint,
      new RangeError("Offset is outside the bounds of the DataView"),
      new SyntaxError("Unexpected token 'o', \"not json\" is not valid JSON"),
      Object.assign(new Error("ENOENT: no such file or directory, open '/secret/path'"), { code: "ENOENT" }),
      "a string",
    ];
    for (const error of thrown) {
      const failure = toInferenceError(error);
      expect(failure.id).toBe("INTERNAL_ERROR");
      expect(failure.code).toBe("INTERNAL");
      expect(failure.message).toBe("internal error: the request failed unexpectedly; the server log has the details");
      expect(failure.cause).toBe(error);
      expect(hiddenCause(failure)).toContain(error instanceof Error ? error.message : String(error));
    }
  });
});

describe("values in error texts", () => {
  it("keeps a value up to ECHO_LIMIT characters whole, Triton's text unchanged", () => {
    const name = "n".repeat(ECHO_LIMIT);
    expect(new InferenceError("MODEL_NOT_FOUND", { model: name }).message).toBe(
      `Request for unknown model: '${name}' is not found`,
    );
  });

  it("cuts a longer one there, marked with its length, not inside a surrogate pair", () => {
    const long = "n".repeat(100_000);
    expect(new InferenceError("SHM_NOT_FOUND", { name: long }).message).toBe(
      `Unable to find shared memory region: '${"n".repeat(ECHO_LIMIT)}...[100000 characters]'`,
    );
    const emoji = `${"n".repeat(ECHO_LIMIT - 1)}😀😀`;
    expect(new InferenceError("SHM_NOT_FOUND", { name: emoji }).message).toBe(
      `Unable to find shared memory region: '${"n".repeat(ECHO_LIMIT - 1)}...[${emoji.length} characters]'`,
    );
  });

  it("bounds texts and lists of names at TEXT_ECHO_LIMIT", () => {
    const text = "t".repeat(TEXT_ECHO_LIMIT);
    expect(new InferenceError("BACKEND_FAILED", { message: text }).message).toBe(text);
    expect(new InferenceError("BACKEND_FAILED", { message: `${text}more` }).message).toBe(
      `${text}...[${TEXT_ECHO_LIMIT + 4} characters]`,
    );
    const given = `['${"i".repeat(TEXT_ECHO_LIMIT)}']`;
    const message = new InferenceError("MISSING_INPUTS", {
      id: "<id_unknown>",
      expected: 2,
      got: 1,
      model: "m",
      given,
      missing: "['INPUT1']",
    }).message;
    expect(message).toContain(`Got input(s) ${given.slice(0, TEXT_ECHO_LIMIT)}...[${given.length} characters], but`);
  });
});
