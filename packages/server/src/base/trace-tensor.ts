import { datatype } from "./datatype.js";
import type { Tensor } from "./tensor.js";

/**
 * A tensor as a TENSORS-level trace object writes it (Triton's `TraceTensorActivity`): the
 * elements comma-separated in `data`, the shape comma-separated, the datatype. As in Triton,
 * floats print as C++ streams do (6 significant digits) and FP16/BF16 elements are left out;
 * unlike Triton, INT8/UINT8 print as numbers (not characters) and BYTES elements are JSON-escaped,
 * so the file stays valid JSON. A tensor on a GPU or in a region has no bytes here: empty `data`.
 */
export function tensorTraceJson(id: number, activity: string, tensor: Tensor): string {
  return `{"id":${id},"activity":"${activity}","tensor":{"name":${JSON.stringify(tensor.name)},"data":${JSON.stringify(
    elements(tensor),
  )},"shape":"${tensor.shape.join(",")}","dtype":"${tensor.datatype}"}}`;
}

function elements(tensor: Tensor): string {
  const { data } = tensor;
  if (data.byteLength === 0) return "";
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const parts: string[] = [];
  if (tensor.datatype === "BYTES") {
    const text = new TextDecoder();
    for (let at = 0; at + 4 <= data.byteLength; ) {
      const length = view.getUint32(at, true);
      if (at + 4 + length > data.byteLength) break;
      parts.push(JSON.stringify(text.decode(data.subarray(at + 4, at + 4 + length))));
      at += 4 + length;
    }
    return parts.join(",");
  }
  const read = READ[tensor.datatype];
  const size = datatype(tensor.datatype)?.byteSize ?? 0;
  if (!read || size === 0) return "";
  for (let at = 0; at + size <= data.byteLength; at += size) parts.push(read(view, at));
  return parts.join(",");
}

const READ: Record<string, (view: DataView, at: number) => string> = {
  BOOL: (v, at) => (v.getUint8(at) === 0 ? "0" : "1"),
  UINT8: (v, at) => String(v.getUint8(at)),
  UINT16: (v, at) => String(v.getUint16(at, true)),
  UINT32: (v, at) => String(v.getUint32(at, true)),
  UINT64: (v, at) => v.getBigUint64(at, true).toString(),
  INT8: (v, at) => String(v.getInt8(at)),
  INT16: (v, at) => String(v.getInt16(at, true)),
  INT32: (v, at) => String(v.getInt32(at, true)),
  INT64: (v, at) => v.getBigInt64(at, true).toString(),
  FP32: (v, at) => general(v.getFloat32(at, true)),
  FP64: (v, at) => general(v.getFloat64(at, true)),
};

/** C++'s default stream format of a float (`%g`, 6 significant digits). */
export function general(value: number): string {
  if (Number.isNaN(value)) return value < 0 ? "-nan" : "nan";
  if (!Number.isFinite(value)) return value < 0 ? "-inf" : "inf";
  if (value === 0) return Object.is(value, -0) ? "-0" : "0";
  const exponent = Math.floor(Math.log10(Math.abs(Number(value.toPrecision(6)))));
  if (exponent < -4 || exponent >= 6) {
    const [mantissa = "", power = "0"] = value.toExponential(5).split("e");
    const digits = Math.abs(Number(power)).toString().padStart(2, "0");
    return `${trim(mantissa)}e${Number(power) < 0 ? "-" : "+"}${digits}`;
  }
  return trim(value.toPrecision(6));
}

function trim(text: string): string {
  return text.includes(".") ? text.replace(/\.?0+$/, "") : text;
}
