import { type DescField, type DescMessage, ScalarType } from "@bufbuild/protobuf";

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
 * the DataView"), so it favours clarity over speed.
 */
export function findWireFault(desc: DescMessage, bytes: Uint8Array): WireFault | undefined {
  return walkMessage(desc, bytes, "", 0);
}

/** A fault as words for a client: `field 'x' is cut short`, or `the message ...` for the message itself. */
export function describeWireFault(fault: WireFault | undefined): string {
  if (!fault) return "not a valid protobuf encoding";
  return fault.field === "" ? `the message ${fault.problem}` : `field '${fault.field}' ${fault.problem}`;
}

/** A varint at `at`: its value (exact below 2^53) and where it ends; undefined when cut short or longer than 10 bytes. */
function varint(bytes: Uint8Array, at: number): { value: number; next: number } | undefined {
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 10; i++) {
    const byte = bytes[at + i];
    if (byte === undefined) return undefined;
    value += (byte & 0x7f) * scale;
    scale *= 128;
    if (byte < 0x80) return { value, next: at + i + 1 };
  }
  return undefined;
}

/** The wire type a scalar is written with: 0 varint, 1 fixed 64-bit, 2 length-delimited, 5 fixed 32-bit. */
function wireTypeOf(scalar: ScalarType): number {
  switch (scalar) {
    case ScalarType.DOUBLE:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return 1;
    case ScalarType.FLOAT:
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
      return 5;
    case ScalarType.STRING:
    case ScalarType.BYTES:
      return 2;
    default:
      return 0;
  }
}

type Step = { next: number } | { fault: WireFault };

function walkMessage(desc: DescMessage, bytes: Uint8Array, path: string, depth: number): WireFault | undefined {
  if (depth > MAX_DEPTH) return { field: path, problem: `nests messages more than ${MAX_DEPTH} deep` };
  let at = 0;
  while (at < bytes.length) {
    const tag = varint(bytes, at);
    if (!tag || tag.value > 0xffffffff || tag.value >>> 3 === 0)
      return { field: path, problem: "has an invalid field tag" };
    const number = tag.value >>> 3;
    const wireType = tag.value & 7;
    const field = desc.fields.find((f) => f.number === number);
    const name = `${path === "" ? "" : `${path}.`}${field ? field.name : `#${number}`}`;
    const step = field
      ? walkField(field, wireType, bytes, tag.next, name, depth)
      : skip(wireType, bytes, tag.next, name, depth);
    if ("fault" in step) return step.fault;
    at = step.next;
  }
  return undefined;
}

/** A length-delimited value at `at`: its bytes (as many as there are) and whether they were all there. */
function delimited(bytes: Uint8Array, at: number): { body: Uint8Array; complete: boolean; next: number } | undefined {
  const length = varint(bytes, at);
  if (!length) return undefined;
  const end = length.next + length.value;
  return { body: bytes.subarray(length.next, end), complete: end <= bytes.length, next: end };
}

function walkField(
  field: DescField,
  wireType: number,
  bytes: Uint8Array,
  at: number,
  name: string,
  depth: number,
): Step {
  const cut = { fault: { field: name, problem: "is cut short" } };
  const wrongType = { fault: { field: name, problem: "has the wrong wire type" } };
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
      if (wireType !== 2) return wrongType;
      return walkMapEntry(field, bytes, at, name, depth);
    case "enum":
      scalar = ScalarType.INT32;
      break;
    case "scalar":
      scalar = field.scalar;
      break;
  }
  if (message) {
    if (wireType !== 2) return wrongType;
    const value = delimited(bytes, at);
    if (!value) return cut;
    const inner = walkMessage(message, value.body, name, depth + 1);
    if (inner) return { fault: inner };
    return value.complete ? { next: value.next } : cut;
  }
  const type = scalar ?? ScalarType.INT32;
  const expected = wireTypeOf(type);
  if (field.fieldKind === "list" && wireType === 2 && expected !== 2) {
    // Packed: the elements one after another inside one length-delimited value.
    const value = delimited(bytes, at);
    if (!value) return cut;
    for (let i = 0; i < value.body.length; ) {
      const element = readScalar(type, expected, value.body, i, name);
      if ("fault" in element) return element;
      i = element.next;
    }
    return value.complete ? { next: value.next } : cut;
  }
  if (wireType !== expected) return wrongType;
  return readScalar(type, expected, bytes, at, name);
}

function readScalar(type: ScalarType, wireType: number, bytes: Uint8Array, at: number, name: string): Step {
  const cut = { fault: { field: name, problem: "is cut short" } };
  switch (wireType) {
    case 0: {
      const value = varint(bytes, at);
      return value ? { next: value.next } : cut;
    }
    case 1:
      return at + 8 <= bytes.length ? { next: at + 8 } : cut;
    case 5:
      return at + 4 <= bytes.length ? { next: at + 4 } : cut;
    default: {
      const value = delimited(bytes, at);
      if (!value?.complete) return cut;
      if (type === ScalarType.STRING) {
        try {
          utf8.decode(value.body);
        } catch {
          return { fault: { field: name, problem: "is not valid UTF-8" } };
        }
      }
      return { next: value.next };
    }
  }
}

/** A map entry: key (field 1) and value (field 2), each optional. */
function walkMapEntry(
  field: DescField & { fieldKind: "map" },
  bytes: Uint8Array,
  at: number,
  name: string,
  depth: number,
): Step {
  const cut = { fault: { field: name, problem: "is cut short" } };
  const entry = delimited(bytes, at);
  if (!entry) return cut;
  const body = entry.body;
  for (let i = 0; i < body.length; ) {
    const tag = varint(body, i);
    if (!tag || tag.value > 0xffffffff) return { fault: { field: name, problem: "has an invalid field tag" } };
    const number = tag.value >>> 3;
    const wireType = tag.value & 7;
    let step: Step;
    if (number === 1) {
      step =
        wireType === wireTypeOf(field.mapKey) ? readScalar(field.mapKey, wireType, body, tag.next, name) : wrong(name);
    } else if (number === 2 && field.mapKind === "message") {
      if (wireType !== 2) return wrong(name);
      const value = delimited(body, tag.next);
      if (!value) return cut;
      const inner = walkMessage(field.message, value.body, name, depth + 1);
      if (inner) return { fault: inner };
      step = value.complete ? { next: value.next } : cut;
    } else if (number === 2) {
      const type = field.scalar ?? ScalarType.INT32;
      step = wireType === wireTypeOf(type) ? readScalar(type, wireType, body, tag.next, name) : wrong(name);
    } else {
      step = skip(wireType, body, tag.next, name, depth);
    }
    if ("fault" in step) return step;
    i = step.next;
  }
  return entry.complete ? { next: entry.next } : cut;
}

function wrong(name: string): Step {
  return { fault: { field: name, problem: "has the wrong wire type" } };
}

/** Skip a field the schema does not know, by its wire type (groups included). */
function skip(wireType: number, bytes: Uint8Array, at: number, name: string, depth: number): Step {
  switch (wireType) {
    case 0:
    case 1:
    case 5:
      return readScalar(ScalarType.BYTES, wireType, bytes, at, name);
    case 2:
      return readScalar(ScalarType.BYTES, 2, bytes, at, name);
    case 3: {
      if (depth > MAX_DEPTH) return { fault: { field: name, problem: `nests groups more than ${MAX_DEPTH} deep` } };
      for (let i = at; ; ) {
        const tag = varint(bytes, i);
        if (!tag || tag.value > 0xffffffff) return { fault: { field: name, problem: "is cut short" } };
        if ((tag.value & 7) === 4) return { next: tag.next };
        const step = skip(tag.value & 7, bytes, tag.next, name, depth + 1);
        if ("fault" in step) return step;
        i = step.next;
      }
    }
    default:
      return { fault: { field: name, problem: "has an invalid wire type" } };
  }
}
