// A JS model whose load lasts until the test says so: its initialize waits for a file.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * Write model `name` (one INT32 input IN, output OUT = IN) into `repo`; its initialize returns only
 * once the returned `open()` has been called, so a test holds the load for exactly as long as it wants.
 */
export function gatedModel(repo: string, name = "slow"): { open(): void } {
  mkdirSync(join(repo, name, "1"), { recursive: true });
  writeFileSync(
    join(repo, name, "config.pbtxt"),
    `name: "${name}"
backend: "js"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
`,
  );
  const gate = join(repo, `${name}.gate`);
  writeFileSync(
    join(repo, name, "1", "model.mjs"),
    `import { existsSync } from "node:fs";
export default class {
  async initialize() {
    while (!existsSync(${JSON.stringify(gate)})) await new Promise((resolve) => setTimeout(resolve, 10));
  }
  execute(requests) { return requests.map((r) => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: r.input("IN").typed() }] })); }
}
`,
  );
  return { open: () => writeFileSync(gate, "") };
}
