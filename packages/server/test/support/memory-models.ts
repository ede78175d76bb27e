// JS models for the memory-aware serving tests: each holds a known amount of host memory from its
// initialize, answers OUT = IN + its own offset, and can hold its load or its executions until the
// test opens a gate file.
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Clock } from "../../src/base/clock.js";
import type { DeviceMemoryReader, DeviceMemoryReading } from "../../src/base/device-memory.js";

export interface MemoryModelOptions {
  /** Host memory its initialize allocates and touches (MiB). */
  mib: number;
  /** OUT = IN + offset. */
  offset: number;
  /** `parameters { key: "galley.pinned" ... }`. */
  pinned?: boolean;
  /** Initialize waits for `<repo>/<name>.load-gate`. */
  gatedLoad?: boolean;
  /** Execute waits for `<repo>/<name>.run-gate` (written by the test), and says it started (`<name>.running`). */
  gatedRun?: boolean;
  /** Initialize throws. */
  failing?: boolean;
  /**
   * Stands for GPU memory: initialize writes `<gpuMarker>/<name>` (a folder outside the repository)
   * and finalize removes it, for a test GPU reader that counts the files (see `markerGpu`).
   */
  gpuMarker?: string;
}

/** Write JS model `name` into `repo` (INT32 IN [1] → INT32 OUT [1]). */
export function memoryModel(repo: string, name: string, options: MemoryModelOptions): void {
  mkdirSync(join(repo, name, "1"), { recursive: true });
  const pinned = options.pinned ? 'parameters { key: "galley.pinned" value: { string_value: "true" } }\n' : "";
  writeFileSync(
    join(repo, name, "config.pbtxt"),
    `name: "${name}"
backend: "js"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
${pinned}`,
  );
  const loadGate = JSON.stringify(join(repo, `${name}.load-gate`));
  const runGate = JSON.stringify(join(repo, `${name}.run-gate`));
  const running = JSON.stringify(join(repo, `${name}.running`));
  const marker = JSON.stringify(join(options.gpuMarker ?? "", name));
  writeFileSync(
    join(repo, name, "1", "model.mjs"),
    `import { existsSync, rmSync, writeFileSync } from "node:fs";
const wait = async (file) => { while (!existsSync(file)) await new Promise((resolve) => setTimeout(resolve, 10)); };
export default class {
  async initialize() {
    ${options.gatedLoad ? `await wait(${loadGate});` : ""}
    ${options.failing ? 'throw new Error("this model does not load");' : ""}
    this.weights = Buffer.alloc(${options.mib} * 1024 * 1024, 7);
    ${options.gpuMarker ? `writeFileSync(${marker}, "");` : ""}
  }
  ${options.gpuMarker ? `finalize() { rmSync(${marker}, { force: true }); }` : ""}
  async execute(requests) {
    ${options.gatedRun ? `writeFileSync(${running}, ""); await wait(${runGate});` : ""}
    return requests.map((r) => ({
      outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: new Int32Array([r.input("IN").typed()[0] + ${options.offset} + (this.weights[0] - 7)]) }],
    }));
  }
}
`,
  );
}

/** Let `name`'s gated load go on. */
export function openLoad(repo: string, name: string): void {
  writeFileSync(join(repo, `${name}.load-gate`), "");
}

/** Let `name`'s gated executions go on. */
export function openRun(repo: string, name: string): void {
  writeFileSync(join(repo, `${name}.run-gate`), "");
}

/**
 * A clock the test moves: `now()` stands still until `advance`, which also runs the timers it
 * passes. `soon` is the event loop's.
 */
export class ManualClock implements Clock {
  #now = 1_000_000_000n;
  readonly #timers = new Set<{ at: bigint; callback: () => void }>();

  now(): bigint {
    return this.#now;
  }

  setTimer(callback: () => void, delayMs: number): unknown {
    const timer = { at: this.#now + BigInt(Math.round(delayMs * 1e6)), callback };
    this.#timers.add(timer);
    return timer;
  }

  clearTimer(handle: unknown): void {
    this.#timers.delete(handle as { at: bigint; callback: () => void });
  }

  soon(callback: () => void): void {
    setImmediate(callback);
  }

  /** Timers armed and not yet run. */
  get pending(): number {
    return this.#timers.size;
  }

  advance(seconds: number): void {
    this.#now += BigInt(Math.round(seconds * 1e9));
    for (const timer of [...this.#timers]) {
      if (timer.at > this.#now) continue;
      this.#timers.delete(timer);
      timer.callback();
    }
  }
}

/**
 * A GPU 0 for the tests: this process holds `perModel` bytes on it for every marker file of a
 * `gpuMarker` model in `folder` (a model loaded and not yet finalized).
 */
export function markerGpu(folder: string, perModel: number): DeviceMemoryReader {
  return {
    async read() {
      const count = readdirSync(folder).length;
      const used = count * perModel;
      const gpu: DeviceMemoryReading = {
        freeBytes: 80 * 2 ** 30 - used,
        usedBytes: used,
        totalBytes: 80 * 2 ** 30,
        processes: [{ pid: process.pid, usedBytes: used }],
      };
      return new Map([[0, gpu]]);
    },
    async releaseCache() {},
  };
}
