import { type DescField, type DescMessage, ScalarType } from "@bufbuild/protobuf";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";

/** Where a protobuf encoding breaks, and how. */
export interface WireFault {
  /** Field names from the outer message down (`inputs.contents.fp32_contents`); `""` for the message itself. */
  field: string;
  /** What is wrong there: `is cut short`, `has the wrong wire type`, `is not valid UTF-8`, ... */
  problem: string;
}

const MAX_DEPTH = 100;
const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Find where `bytes` stop being a valid encoding of `desc`: the innermost field whose bytes are
 * cut short or malformed. Undefined when the walk finds nothing wrong. It only explains a message
 * that `fromBinary` refused (whose own errors are JavaScript's: "Offset is outside the bounds of
 * the DataView"), so it favours clarity over speed. The bytes are read with protobuf-es's own
 * reader, as `fromBinary` reads them; what is added is the schema walk that names the field.
 */
export function findWireFault(desc: DescMessage, bytes: Uint8Array): WireFault | undefined {
  return walkMessage(desc, bytes, "", 0);
}

/** A fault as words for a client: `field 'x' is cut short`, or `the message ...` for the message itself. */
export function describeWireFault(fault: WireFault | undefined): string {
  if (!fault) return "not a valid protobuf encoding";
  return fault.field === "" ? `the message ${fault.problem}` : `field '${fault.field}' ${fault.problem}`;
}

/** The wire type a scalar is written with. */
function wireTypeOf(scalar: ScalarType): WireType {
  switch (scalar) {
    case ScalarType.DOUBLE:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return WireType.Bit64;
    case ScalarType.FLOAT:
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
      return WireType.Bit32;
    case ScalarType.STRING:
    case ScalarType.BYTES:
      return WireType.LengthDelimited;
    default:
      return WireType.Varint;
  }
}

/** protobuf-es's reader, with the bytes it reads (for the values it does not read itself). */
class Reader extends BinaryReader {
  get source(): Uint8Array {
    return this.buf;
  }
}

/** A fault, or nothing wrong up to where the reader now is. */
type Step = WireFault | undefined;

const cut = (field: string): WireFault => ({ field, problem: "is cut short" });
const wrongType = (field: string): WireFault => ({ field, problem: "has the wrong wire type" });

/** A field's tag: its number and wire type, or undefined when the tag is no valid one. */
function tag(reader: Reader): { number: number; wireType: number } | undefined {
  try {
    const value = reader.uint32();
    return value >>> 3 === 0 ? undefined : { number: value >>> 3, wireType: value & 7 };
  } catch {
    return undefined;
  }
}

function walkMessage(desc: DescMessage, bytes: Uint8Array, path: string, depth: number): WireFault | undefined {
  if (depth > MAX_DEPTH) return { field: path, problem: `nests messages more than ${MAX_DEPTH} deep` };
  const reader = new Reader(bytes);
  while (reader.pos < reader.len) {
    const read = tag(reader);
    if (!read) return { field: path, problem: "has an invalid field tag" };
    const field = desc.fields.find((f) => f.number === read.number);
    const name = `${path === "" ? "" : `${path}.`}${field ? field.name : `#${read.number}`}`;
    const fault = field
      ? walkField(field, read.wireType, reader, name, depth)
      : skip(read.wireType, read.number, reader, name);
    if (fault) return fault;
  }
  return undefined;
}

/**
 * A length-delimited value: its bytes (as many as there are) and whether they were all there; the
 * reader is left after it. Undefined when its length is cut short.
 */
function delimited(reader: Reader): { body: Uint8Array; complete: boolean } | undefined {
  let length: number;
  try {
    length = reader.uint32();
  } catch {
    return undefined;
  }
  const end = reader.pos + length;
  const body = reader.source.subarray(reader.pos, Math.min(end, reader.len));
  reader.pos = Math.min(end, reader.len);
  return { body, complete: end <= reader.len };
}

/** A nested message's value: the innermost fault inside it, or whether it was cut short. */
function nested(message: DescMessage, reader: Reader, name: string, depth: number): Step {
  const value = delimited(reader);
  if (!value) return cut(name);
  return walkMessage(message, value.body, name, depth + 1) ?? (value.complete ? undefined : cut(name));
}

function walkField(field: DescField, wireType: number, reader: Reader, name: string, depth: number): Step {
  let message: DescMessage | undefined;
  let scalar: ScalarType | undefined;
  switch (field.fieldKind) {
    case "message":
      message = field.message;
      break;
    case "list":
      if (field.listKind === "message") message = field.message;
      else scalar = field.listKind === "enum" ? ScalarType.INT32 : field.scalar;
      break;
    case "map":
      return wireType === WireType.LengthDelimited ? walkMapEntry(field, reader, name, depth) : wrongType(name);
    case "enum":
      scalar = ScalarType.INT32;
      break;
    case "scalar":
      scalar = field.scalar;
      break;
  }
  if (message) return wireType === WireType.LengthDelimited ? nested(message, reader, name, depth) : wrongType(name);
  const type = scalar ?? ScalarType.INT32;
  const expected = wireTypeOf(type);
  if (field.fieldKind === "list" && wireType === WireType.LengthDelimited && expected !== WireType.LengthDelimited) {
    // Packed: the elements one after another inside one length-delimited value.
    const value = delimited(reader);
    if (!value) return cut(name);
    const elements = new Reader(value.body);
    while (elements.pos < elements.len) {
      const fault = readScalar(type, expected, elements, name);
      if (fault) return fault;
    }
    return value.complete ? undefined : cut(name);
  }
  return wireType === expected ? readScalar(type, expected, reader, name) : wrongType(name);
}

function readScalar(type: ScalarType, wireType: WireType, reader: Reader, name: string): Step {
  if (wireType !== WireType.LengthDelimited) {
    try {
      reader.skip(wireType);
      return undefined;
    } catch {
      return cut(name);
    }
  }
  const value = delimited(reader);
  if (!value?.complete) return cut(name);
  if (type === ScalarType.STRING) {
    try {
      utf8.decode(value.body);
    } catch {
      return { field: name, problem: "is not valid UTF-8" };
    }
  }
  return undefined;
}

/** A map entry: key (field 1) and value (field 2), each optional. */
function walkMapEntry(field: DescField & { fieldKind: "map" }, reader: Reader, name: string, depth: number): Step {
  const entry = delimited(reader);
  if (!entry) return cut(name);
  const inner = new Reader(entry.body);
  while (inner.pos < inner.len) {
    const read = tag(inner);
    if (!read) return { field: name, problem: "has an invalid field tag" };
    let fault: Step;
    if (read.number === 1) {
      const type = wireTypeOf(field.mapKey);
      fault = read.wireType === type ? readScalar(field.mapKey, type, inner, name) : wrongType(name);
    } else if (read.number === 2 && field.mapKind === "message") {
      fault = read.wireType === WireType.LengthDelimited ? nested(field.message, inner, name, depth) : wrongType(name);
    } else if (read.number === 2) {
      const scalar = field.scalar ?? ScalarType.INT32;
      const type = wireTypeOf(scalar);
      fault = read.wireType === type ? readScalar(scalar, type, inner, name) : wrongType(name);
    } else {
      fault = skip(read.wireType, read.number, inner, name);
    }
    if (fault) return fault;
  }
  return entry.complete ? undefined : cut(name);
}

/** Skip a field the schema does not know, by its wire type (groups included, to protobuf-es's depth). */
function skip(wireType: number, number: number, reader: Reader, name: string): Step {
  if (wireType > WireType.Bit32) return { field: name, problem: "has an invalid wire type" };
  try {
    reader.skip(wireType as WireType, number, MAX_DEPTH);
    return undefined;
  } catch {
    return cut(name);
  }
}
