import { create } from "@bufbuild/protobuf";
import { ModelConfigSchema } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { createLogger } from "../base/log.js";
import { ModelStatistics } from "../base/statistics.js";
import { LoadedModel } from "./loaded-model.js";
import { type BudgetHost, MemoryBudget } from "./memory-budget.js";

const MIB = 2 ** 20;

function model(name: string, mib: number, options: { lastUsed?: bigint; loadedAt?: bigint; pinned?: boolean } = {}) {
  const config = create(ModelConfigSchema, {
    name,
    parameters: options.pinned ? { "galley.pinned": { stringValue: "true" } } : {},
  });
  const scheduler = { enqueue: () => Promise.reject(new Error("unused")), drain: async () => {} };
  const m = new LoadedModel(
    name,
    1,
    config,
    { instances: [], unload: async () => {} },
    scheduler,
    new Map(),
    new ModelStatistics(),
  );
  m.memory = [{ type: "CPU", id: 0, byteSize: mib * MIB }];
  m.loadedAtNs = options.loadedAt ?? 0n;
  m.lastUsedNs = options.lastUsed ?? m.loadedAtNs;
  return m;
}

function setup(models: LoadedModel[], now = 100n * 10n ** 9n, minResidencyNs = 30n * 10n ** 9n) {
  const loaded = new Set(models);
  const evicted: string[] = [];
  const host: BudgetHost = {
    loaded: () => [...loaded],
    evictable: () => true,
    evict: async (name) => {
      evicted.push(name);
      for (const m of [...loaded]) if (m.name === name) loaded.delete(m);
    },
    now: () => now,
  };
  const budget = new MemoryBudget({ host: 100 * MIB }, minResidencyNs, host, createLogger({ write: () => {} }));
  // As the model manager: a version serves (and counts among the others) once its admitted load returned.
  const admit = async (name: string, expected: number, mib: number) => {
    const m = await budget.admit(name, [{ type: "CPU", id: 0, byteSize: expected * MIB }], async () =>
      model(name, mib, { loadedAt: now }),
    );
    loaded.add(m);
    return m;
  };
  return { budget, evicted, admit, loaded };
}

describe("MemoryBudget", () => {
  it("evicts the least recently used idle model until the known size fits, then again once measured", async () => {
    const { evicted, admit, budget } = setup([
      model("a", 40, { lastUsed: 3n }),
      model("b", 40, { lastUsed: 1n }),
      model("c", 10, { lastUsed: 2n }),
    ]);
    await admit("d", 20, 40);
    // Before: 90 + 20 > 100 → b (least recent) goes; after: 50 + 40 = 90 fits.
    expect(evicted).toEqual(["b"]);
    await admit("e", 0, 30);
    // Unknown size: loaded first, then 120 > 100 → c (next least recent) and then a.
    expect(evicted).toEqual(["b", "c", "a"]);
    expect(budget.evictions).toEqual(
      new Map([
        ["b", 1],
        ["c", 1],
        ["a", 1],
      ]),
    );
  });

  it("never evicts a busy, pinned or young model; a known size that cannot fit is refused", async () => {
    const busy = model("busy", 30, { lastUsed: 1n });
    busy.active = 1;
    const pinned = model("pinned", 30, { lastUsed: 2n, pinned: true });
    const young = model("young", 30, { lastUsed: 3n, loadedAt: 99n * 10n ** 9n });
    const { evicted, admit } = setup([busy, pinned, young]);
    await expect(admit("d", 20, 20)).rejects.toMatchObject({
      id: "MEMORY_BUDGET_FULL",
      code: "UNAVAILABLE",
      message: expect.stringMatching(
        /^not enough room in --model-memory-budget host:100\.0 MiB for 'd': it needs 20\.0 MiB/,
      ),
    });
    expect(evicted).toEqual([]);
    // Unknown size: it loads, and the models stay over the budget.
    await admit("e", 0, 20);
    expect(evicted).toEqual([]);
  });

  it("refuses a model larger than the whole budget; loads pass one at a time", async () => {
    const { admit } = setup([]);
    await expect(admit("huge", 101, 0)).rejects.toMatchObject({ id: "LOAD_FAILED" });
    const order: string[] = [];
    const { budget } = setup([]);
    let release!: () => void;
    const first = budget.admit("x", [], async () => {
      order.push("x start");
      await new Promise<void>((resolve) => {
        release = resolve;
      });
      order.push("x end");
      return model("x", 1);
    });
    const second = budget.admit("y", [], async () => {
      order.push("y start");
      return model("y", 1);
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(order).toEqual(["x start"]);
    release();
    await Promise.all([first, second]);
    expect(order).toEqual(["x start", "x end", "y start"]);
  });

  it("keeps each GPU under its own limit by the same rule: only models holding that GPU's memory go", async () => {
    const gpu = (m: LoadedModel, gpu0Mib: number, gpu1Mib = 0) => {
      m.memory = [
        { type: "CPU", id: 0, byteSize: MIB },
        { type: "GPU", id: 0, byteSize: gpu0Mib * MIB },
        ...(gpu1Mib > 0 ? [{ type: "GPU" as const, id: 1, byteSize: gpu1Mib * MIB }] : []),
      ];
      return m;
    };
    const a = gpu(model("a", 1, { lastUsed: 1n }), 0, 60);
    const b = gpu(model("b", 1, { lastUsed: 2n }), 50);
    const c = gpu(model("c", 1, { lastUsed: 3n }), 40);
    const loaded = new Set([a, b, c]);
    const evicted: string[] = [];
    const budget = new MemoryBudget(
      { gpus: new Map([[0, 100 * MIB]]) },
      0n,
      {
        loaded: () => [...loaded],
        evictable: () => true,
        evict: async (name) => {
          evicted.push(name);
          for (const m of [...loaded]) if (m.name === name) loaded.delete(m);
        },
        now: () => 10n,
      },
      createLogger({ write: () => {} }),
    );
    // d took 30 MiB of GPU 0 last time: 90 + 30 > 100. a is the least recent but holds only GPU 1.
    const d = await budget.admit("d", [{ type: "GPU", id: 0, byteSize: 30 * MIB }], async () => gpu(model("d", 1), 30));
    loaded.add(d);
    expect(evicted).toEqual(["b"]);
    // Host memory has no limit here: any amount of it is let in.
    await budget.admit("e", [{ type: "CPU", id: 0, byteSize: 10 ** 12 }], async () => model("e", 1));
    expect(evicted).toEqual(["b"]);
    await expect(
      budget.admit("f", [{ type: "GPU", id: 0, byteSize: 101 * MIB }], async () => model("f", 1)),
    ).rejects.toMatchObject({ id: "LOAD_FAILED", message: expect.stringContaining("GPU 0 memory") });
  });
});
