// tokenizer: a byte-level tokenizer. Token 0 pads, 1 begins, 2 ends, byte b is b + 3. A real text
// encoder comes with its own tokenizer (CLIP's BPE, T5's SentencePiece): replace this model with
// one that produces that tokenizer's ids (see the README).
import type { Model, Request, Response } from "@galley/server/model";

const LENGTH = 32;

export function tokenize(prompt: string): BigInt64Array {
  const tokens = new BigInt64Array(LENGTH);
  const bytes = new TextEncoder().encode(prompt).subarray(0, LENGTH - 2);
  tokens[0] = 1n;
  for (const [i, b] of bytes.entries()) tokens[i + 1] = BigInt(b + 3);
  tokens[bytes.length + 1] = 2n;
  return tokens;
}

export default class Tokenizer implements Model {
  execute(requests: readonly Request[]): Response[] {
    return requests.map((request) => {
      const prompts = request.input("PROMPT")?.strings() ?? [];
      const tokens = new BigInt64Array(prompts.length * LENGTH);
      for (const [i, prompt] of prompts.entries()) tokens.set(tokenize(prompt), i * LENGTH);
      return { outputs: [{ name: "TOKENS", datatype: "INT64", shape: [prompts.length, LENGTH], data: tokens }] };
    });
  }
}
