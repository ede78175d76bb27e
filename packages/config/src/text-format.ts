import { fromText, toText } from "@bufbuild/protobuf/txtpb";
import { type ModelConfig, ModelConfigSchema } from "@galley/proto";

/** A `config.pbtxt` that cannot be read, with the 1-based line and column of the problem. */
export class ConfigParseError extends Error {
  override name = "ConfigParseError";
  constructor(
    /** The parser's description, e.g. `unknown field "max_batch_sise" for message inference.ModelConfig`. */
    readonly reason: string,
    readonly line: number,
    readonly column: number,
    /** The file the text came from, when known. */
    readonly file?: string,
  ) {
    super(`${file ?? "config.pbtxt"}:${line}:${column}: ${reason}`);
  }
}

/**
 * Parse a `config.pbtxt` (protobuf text format) into a {@link ModelConfig}. Unknown fields and
 * enum values are errors, as in Triton. List (`input [ {...}, {...} ]`) and repeated-block forms,
 * `#` comments and optional colons are all read.
 *
 * @param file - named in the error message, e.g. `models/simple/config.pbtxt`.
 * @throws {@link ConfigParseError} naming the line and column of the first problem.
 *
 * @example
 * const config = parseModelConfig('name: "simple"\nmax_batch_size: 8');
 * config.maxBatchSize // 8
 */
export function parseModelConfig(text: string, file?: string): ModelConfig {
  try {
    return fromText(ModelConfigSchema, text);
  } catch (error) {
    const reason = (error as Error).message;
    const { line, column } = locate(text, reason);
    throw new ConfigParseError(reason, line, column, file);
  }
}

/**
 * Print a {@link ModelConfig} as `config.pbtxt` text. Printing is stable:
 * `printModelConfig(parseModelConfig(printModelConfig(c))) === printModelConfig(c)`.
 */
export function printModelConfig(config: ModelConfig): string {
  return toText(ModelConfigSchema, config);
}

/**
 * Where the parser failed. The text-format reader does not report positions, so the parser
 * itself is the oracle: the shortest prefix that fails with the same message ends at the
 * offending token (a shorter prefix stops before it, with a different complaint). Only runs on
 * the error path; log2(length) parses of a few kilobytes.
 */
function locate(text: string, reason: string): { line: number; column: number } {
  if (reason.startsWith("unexpected end of input")) return position(text, text.trimEnd().length);
  const failsAlike = (end: number) => {
    try {
      fromText(ModelConfigSchema, text.slice(0, end));
      return false;
    } catch (error) {
      return (error as Error).message === reason;
    }
  };
  let end = text.length;
  if (failsAlike(end)) {
    let low = 0;
    while (low < end) {
      const mid = (low + end) >>> 1;
      if (failsAlike(mid)) end = mid;
      else low = mid + 1;
    }
  }
  return position(text, tokenStart(text, end));
}

function position(text: string, offset: number): { line: number; column: number } {
  const before = text.slice(0, offset);
  return { line: before.split("\n").length, column: offset - before.lastIndexOf("\n") };
}

/**
 * The start of the token that ends at `end`: a quoted string, a word (identifier or number), or
 * one punctuation mark. A sign belongs to the word after it (`-inf`, `-foo`), and the exponent
 * sign inside a number (`1e-5`) does not end the word.
 */
function tokenStart(text: string, end: number): number {
  let at = end;
  while (at > 0 && /\s/.test(text[at - 1] ?? "")) at--;
  const last = text[at - 1];
  if (last === '"' || last === "'") {
    const open = text.lastIndexOf(last, at - 2);
    return open === -1 ? at - 1 : open;
  }
  const word = /[\w.]/;
  let start = at;
  for (;;) {
    while (start > 0 && word.test(text[start - 1] ?? "")) start--;
    const sign = text[start - 1];
    if (sign !== "-" && sign !== "+") break;
    const exponent = /[0-9.][eE]$/.test(text.slice(Math.max(0, start - 3), start - 1));
    start--;
    if (!exponent) break;
  }
  return start === at ? Math.max(0, at - 1) : start;
}
