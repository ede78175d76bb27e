// Flag values read as tritonserver reads them (server `src/command_line_parser.cc`: `ParseOption<T>`,
// `ParsePairOption`, `ParseGenericConfigOption`), with its error texts, so a value tritonserver takes
// is taken here and one it refuses is refused with the same words. `std::stoi` and friends read a
// number at the start of the text and ignore what follows (`12abc` is 12), as here.

/** A value tritonserver refuses: the message is `Bad option: "--<flag>".` and Triton's reason. */
export class TritonValueError extends Error {
  override name = "TritonValueError";
  constructor(flag: string, reason: string) {
    super(`Bad option: "--${flag}".\n${reason}`);
  }
}

const invalid = (flag: string, text: string) => new TritonValueError(flag, `Invalid option value. Got ${text}`);
const outOfBound = (flag: string, text: string) =>
  new TritonValueError(flag, `Provided option value is out of bound. Got ${text}`);

/** The leading integer `std::stoi`/`stoll`/`stoull` read (whitespace, sign, decimal digits), or none. */
function leadingInteger(text: string): bigint | undefined {
  const match = /^[ \t\n\v\f\r]*([+-]?\d+)/.exec(text);
  return match ? BigInt(match[1] as string) : undefined;
}

/** `ParseOption<int>` (`std::stoi`): a 32-bit signed integer. */
export function tritonInt(flag: string, text: string): number {
  const n = leadingInteger(text);
  if (n === undefined) throw invalid(flag, text);
  if (n < -(2n ** 31n) || n >= 2n ** 31n) throw outOfBound(flag, text);
  return Number(n);
}

/** `ParseOption<int64_t>` (`std::stoll`). */
export function tritonInt64(flag: string, text: string): bigint {
  const n = leadingInteger(text);
  if (n === undefined) throw invalid(flag, text);
  if (n < -(2n ** 63n) || n >= 2n ** 63n) throw outOfBound(flag, text);
  return n;
}

/** `ParseOption<uint64_t>` (`std::stoull`): a negative value wraps around, as `strtoull` does. */
export function tritonUint64(flag: string, text: string): bigint {
  const n = leadingInteger(text);
  if (n === undefined) throw invalid(flag, text);
  const magnitude = n < 0n ? -n : n;
  if (magnitude >= 2n ** 64n) throw outOfBound(flag, text);
  return n < 0n && magnitude !== 0n ? 2n ** 64n - magnitude : magnitude;
}

/** `ParseOption<double>` (`std::stod`): a leading decimal number, `inf`/`infinity` or `nan`. */
export function tritonDouble(flag: string, text: string): number {
  const match =
    /^[ \t\n\v\f\r]*([+-]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan))/i.exec(text);
  if (!match) throw invalid(flag, text);
  const literal = (match[1] as string).toLowerCase();
  const sign = literal.startsWith("-") ? -1 : 1;
  const body = literal.replace(/^[+-]/, "");
  if (body.startsWith("inf")) return sign * Number.POSITIVE_INFINITY;
  if (body === "nan") return Number.NaN;
  const value = body.startsWith("0x") ? sign * Number.parseInt(body, 16) : Number(literal);
  // strtod reports ERANGE on overflow (and on underflow to zero of a non-zero literal).
  if (!Number.isFinite(value) || (value === 0 && /[1-9]/.test(body.split(/e/)[0] as string))) {
    throw outOfBound(flag, text);
  }
  return value;
}

/** `ParseOption<bool>`: true/on/1 or false/off/0, any case. */
export function tritonBool(flag: string, text: string): boolean {
  const lower = text.toLowerCase();
  if (lower === "true" || lower === "on" || lower === "1") return true;
  if (lower === "false" || lower === "off" || lower === "0") return false;
  throw new TritonValueError(flag, `invalid value for bool option: ${text}`);
}

/** `ParseIntBoolOption` (`--log-verbose`): true is 1, false is 0, else `std::stoi`. */
export function tritonIntBool(flag: string, text: string): number {
  const lower = text.toLowerCase();
  if (lower === "true") return 1;
  if (lower === "false") return 0;
  return tritonInt(flag, text);
}

/** `ParsePairOption`: `<first><delim><second>`, split at the first `delim`. */
export function tritonPair<A, B>(
  flag: string,
  text: string,
  delim: string,
  first: (flag: string, text: string) => A,
  second: (flag: string, text: string) => B,
): [A, B] {
  const at = text.indexOf(delim);
  if (at < 0) {
    throw new TritonValueError(
      flag,
      "Cannot parse pair option due to incorrect number of inputs." +
        `--<pair option> argument requires format <first>${delim}<second>. Found: ${text}`,
    );
  }
  return [first(flag, text.slice(0, at)), second(flag, text.slice(at + delim.length))];
}

/** `ParseGenericConfigOption`: `<name><first><setting><second><value>`, none of the three empty. */
export function tritonGeneric(
  flag: string,
  text: string,
  firstDelim: string,
  secondDelim: string,
  configName: string,
): [string, string, string] {
  const nameAt = text.indexOf(firstDelim);
  const settingAt = text.indexOf(secondDelim, nameAt + 1);
  const error = new TritonValueError(
    flag,
    `--${flag} option format is '<${configName}>${firstDelim}<setting>${secondDelim}<value>'. Got ${text}`,
  );
  if (nameAt < 0 || settingAt < 0) throw error;
  const parts: [string, string, string] = [
    text.slice(0, nameAt),
    text.slice(nameAt + 1, settingAt),
    text.slice(settingAt + 1),
  ];
  if (parts.some((part) => part === "")) throw error;
  return parts;
}
