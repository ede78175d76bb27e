// tokenizer: a byte-level tokenizer. Token 0 pads, 1 begins, 2 ends, byte b is b + 3. A real text
// encoder comes with its own tokenizer (CLIP's BPE, T5's SentencePiece): replace this model with
// one that produces that tokenizer's ids (see the README).
// The length is the config's `length` parameter (default 32; models-real's T5-size encoder: 77).
import type { InitializeArgs, Model, Request, Response } from "@galley/server/model";

const LENGTH = 32;

export function tokenize(prompt: string, length = LENGTH): BigInt64Array {
  const tokens = new BigInt64Array(length);
  const bytes = new TextEncoder().encode(prompt).subarray(0, length - 2);
  tokens[0] = 1n;
  for (const [i, b] of bytes.entries()) tokens[i + 1] = BigInt(b + 3);
  tokens[bytes.length + 1] = 2n;
  return tokens;
}

export default class Tokenizer implements Model {
  #length = LENGTH;

  initialize(args: InitializeArgs): void {
    const config = JSON.parse(args.model_config) as { parameters?: Record<string, { string_value: string }> };
    const text = config.parameters?.length?.string_value ?? String(LENGTH);
    const length = Number(text);
    if (!Number.isInteger(length) || length < 3) throw new Error(`length must be a whole number >= 3, not '${text}'`);
    this.#length = length;
  }

  execute(requests: readonly Request[]): Response[] {
    const length = this.#length;
    return requests.map((request) => {
      const prompts = request.input("PROMPT")?.strings() ?? [];
      const tokens = new BigInt64Array(prompts.length * length);
      for (const [i, prompt] of prompts.entries()) tokens.set(tokenize(prompt, length), i * length);
      return { outputs: [{ name: "TOKENS", datatype: "INT64", shape: [prompts.length, length], data: tokens }] };
    });
  }
}
