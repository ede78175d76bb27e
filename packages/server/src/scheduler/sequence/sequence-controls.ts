import {
  DataType,
  encodeBytesElements,
  ModelSequenceBatching_Control_Kind as Kind,
  type ModelSequenceBatching,
} from "@galley/proto";
import type { Tensor } from "../../base/tensor.js";

/** A sequence's correlation id: integer (uint64 on the wire) or string. */
export type CorrelationId = bigint | string;

/** The control signals of one request of a sequence. */
export interface ControlSignals {
  start: boolean;
  end: boolean;
  ready: boolean;
  correlationId: CorrelationId;
}

const encoder = new TextEncoder();

/**
 * The control input tensors the sequence batcher adds to a request (PROTOCOL.md §3.7): START,
 * END and READY from their `*_false_true` pairs (INT32, FP32 or BOOL), CORRID in its data type
 * (UINT64, INT64, UINT32, INT32 — truncated to 32 bits — or STRING). Shape `[1, 1]` for a
 * batching model, `[1]` otherwise.
 */
export function controlTensors(batching: ModelSequenceBatching, signals: ControlSignals, batched: boolean): Tensor[] {
  const shape = batched ? [1, 1] : [1];
  const tensors: Tensor[] = [];
  for (const input of batching.controlInput) {
    for (const control of input.control) {
      const flag =
        control.kind === Kind.CONTROL_SEQUENCE_START
          ? signals.start
          : control.kind === Kind.CONTROL_SEQUENCE_END
            ? signals.end
            : control.kind === Kind.CONTROL_SEQUENCE_READY
              ? signals.ready
              : undefined;
      if (flag !== undefined) {
        tensors.push({ name: input.name, ...booleanControl(control, flag), shape, parameters: {} });
      } else if (control.kind === Kind.CONTROL_SEQUENCE_CORRID) {
        tensors.push({
          name: input.name,
          ...correlationTensor(control.dataType, signals.correlationId),
          shape,
          parameters: {},
        });
      }
    }
  }
  return tensors;
}

function booleanControl(
  control: ModelSequenceBatching["controlInput"][number]["control"][number],
  flag: boolean,
): Pick<Tensor, "datatype" | "data"> {
  const index = flag ? 1 : 0;
  if (control.fp32FalseTrue.length === 2) {
    return { datatype: "FP32", data: new Uint8Array(new Float32Array([control.fp32FalseTrue[index] ?? 0]).buffer) };
  }
  if (control.boolFalseTrue.length === 2)
    return { datatype: "BOOL", data: Uint8Array.of(control.boolFalseTrue[index] ? 1 : 0) };
  return { datatype: "INT32", data: new Uint8Array(new Int32Array([control.int32FalseTrue[index] ?? 0]).buffer) };
}

function correlationTensor(type: DataType, id: CorrelationId): Pick<Tensor, "datatype" | "data"> {
  const value = typeof id === "bigint" ? id : 0n;
  switch (type) {
    case DataType.TYPE_STRING:
      return { datatype: "BYTES", data: encodeBytesElements([encoder.encode(String(id))]) };
    case DataType.TYPE_INT64:
      return { datatype: "INT64", data: new Uint8Array(new BigInt64Array([BigInt.asIntN(64, value)]).buffer) };
    case DataType.TYPE_UINT32:
      return { datatype: "UINT32", data: new Uint8Array(new Uint32Array([Number(BigInt.asUintN(32, value))]).buffer) };
    case DataType.TYPE_INT32:
      return { datatype: "INT32", data: new Uint8Array(new Int32Array([Number(BigInt.asIntN(32, value))]).buffer) };
    default:
      return { datatype: "UINT64", data: new Uint8Array(new BigUint64Array([BigInt.asUintN(64, value)]).buffer) };
  }
}

/** Whether string correlation ids are configured (CORRID of TYPE_STRING). */
export function usesStringIds(batching: ModelSequenceBatching): boolean {
  return batching.controlInput.some((i) =>
    i.control.some((c) => c.kind === Kind.CONTROL_SEQUENCE_CORRID && c.dataType === DataType.TYPE_STRING),
  );
}

/** Whether a CORRID control is configured at all. */
export function hasCorrelationControl(batching: ModelSequenceBatching): boolean {
  return batching.controlInput.some((i) => i.control.some((c) => c.kind === Kind.CONTROL_SEQUENCE_CORRID));
}
