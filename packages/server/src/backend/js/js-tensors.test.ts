import { describe, expect, it } from "vitest";
import { ERRORS, InferenceError } from "../../base/errors.js";
import {
  TENSOR_ERROR_IDS,
  type TensorErrorTable,
  toWireTensor,
  useErrorTable,
  wireError,
  wrapTensor,
} from "./js-tensors.js";

useErrorTable(Object.fromEntries(TENSOR_ERROR_IDS.map((id) => [id, ERRORS[id]])) as TensorErrorTable);

/** What `fn` throws, as it crosses to the server (see `wireError`). */
function thrown(fn: () => unknown) {
  try {
    fn();
  } catch (error) {
    return wireError(error);
  }
  throw new Error("nothing was thrown");
}

describe("a scripted model's tensor errors", () => {
  it.each([
    [() => toWireTensor({ name: "OUT", datatype: "INT32", shape: [2], data: [1, 2] as never }), "JS_OUTPUT_LIST"],
    [
      () => toWireTensor({ name: "OUT", datatype: "NOPE" as never, shape: [1], data: Int32Array.of(1) }),
      "JS_OUTPUT_UNKNOWN_DATATYPE",
    ],
    [() => toWireTensor({ name: "OUT", datatype: "BYTES", shape: [2], data: ["a"] }), "JS_OUTPUT_ELEMENT_COUNT"],
    [
      () => toWireTensor({ name: "OUT", datatype: "INT32", shape: [1, 2], data: Int32Array.of(1) }),
      "JS_OUTPUT_BYTE_SIZE",
    ],
    [
      () => wrapTensor({ name: "IN", datatype: "BYTES", shape: [1], data: new Uint8Array(5) }).typed(),
      "JS_TENSOR_NO_TYPED_ARRAY",
    ],
    [
      () => wrapTensor({ name: "IN", datatype: "INT32", shape: [1], data: new Uint8Array(4) }).bytes(),
      "JS_TENSOR_NOT_BYTES",
    ],
  ])("%#: %s, with the table's code and text, and its id across the thread", (fn, id) => {
    const wire = thrown(fn);
    expect(wire.id).toBe(id);
    const error = new InferenceError(wire.id as never, wire.values);
    expect([wire.code, wire.message]).toEqual([error.code, error.message]);
    expect(wire.message).not.toContain("{");
  });

  it("words the byte count against the shape", () => {
    expect(
      thrown(() => toWireTensor({ name: "OUT", datatype: "INT32", shape: [1, 2], data: Int32Array.of(1) })).message,
    ).toBe("output 'OUT' has 4 bytes, its shape [1,2] of INT32 needs 8");
  });
});
