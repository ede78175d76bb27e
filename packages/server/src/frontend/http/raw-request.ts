import { dataTypeToProtocol, dimsString, type ProtocolDataType } from "@galley/config";
import { datatype } from "../../base/datatype.js";
import { InferenceError } from "../../base/errors.js";
import type { ModelView } from "../../core/inference-server.js";
import type { Body } from "../transport/http-exchange.js";
import type { DecodedInfer } from "./infer-request.js";

/** Whether a raw request (header length 0) to this model carries one BYTES element. */
export function rawIsBytes(model: ModelView): boolean {
  const input = model.config.input;
  return input.length === 1 && dataTypeToProtocol((input[0] as (typeof input)[0]).dataType) === "BYTES";
}

/**
 * A raw binary request (`Inference-Header-Content-Length: 0`): the body is the data of the
 * model's single input, batch 1, its shape deduced from the config; every output is binary.
 */
export function decodeRaw(body: Body, model: ModelView, modelName: string, modelVersion: string): DecodedInfer {
  const config = model.config;
  const input = config.input[0];
  if (config.input.length !== 1 || !input) {
    throw new InferenceError("RAW_INPUT_COUNT", { count: config.input.length, model: modelName });
  }
  const shape = config.maxBatchSize > 0 ? [1] : [];
  let variable = -1;
  let known = 1;
  for (const d of input.dims) {
    const dim = Number(d);
    if (dim === -1) {
      if (variable !== -1) throw new InferenceError("RAW_VARIABLE_DIMS", { input: input.name });
      variable = shape.length;
    } else {
      known *= dim;
    }
    shape.push(dim);
  }
  const type = dataTypeToProtocol(input.dataType) as ProtocolDataType;
  const size = body.bytes.byteLength;
  let data: Uint8Array;
  if (type === "BYTES") {
    if (variable !== -1 || known !== 1) throw new InferenceError("RAW_BYTES_SHAPE", { input: input.name });
    // One element: the 4-byte length goes in the room left before the body.
    if (body.offset >= 4) {
      data = new Uint8Array(body.buffer, body.offset - 4, size + 4);
    } else {
      data = new Uint8Array(size + 4);
      data.set(body.bytes, 4);
    }
    new DataView(data.buffer, data.byteOffset, 4).setUint32(0, size, true);
  } else {
    if (variable !== -1) {
      const unit = known * (datatype(type)?.byteSize ?? 1);
      if (unit === 0 ? size !== 0 : size % unit !== 0) {
        throw new InferenceError("RAW_SIZE", { input: input.name, size, shape: dimsString(shape.map(BigInt)) });
      }
      shape[variable] = unit === 0 ? 0 : size / unit;
    }
    data = body.bytes;
  }
  return {
    request: {
      modelName,
      modelVersion,
      id: "",
      parameters: {},
      inputs: [{ name: input.name, datatype: type, shape, data, parameters: {}, movable: true }],
      outputs: [],
    },
    plan: { listed: new Map(), binaryByDefault: true },
  };
}
