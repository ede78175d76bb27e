import { describe, expect, it } from "vitest";
import { parseMemoryBudget } from "./memory-options.js";
import { parseServeArgs, UsageError } from "./serve-options.js";

const serve = (...flags: string[]) => parseServeArgs(["--model-repository", "/models", ...flags]);
const explicit = ["--model-control-mode=explicit"];

describe("memory flags", () => {
  it("are off by default: explicit mode stays Triton's", () => {
    const options = serve(...explicit);
    if (options === "help") throw new Error("help");
    expect(options.server.loadOnDemand).toBeUndefined();
    expect(options.server.modelMemoryBudget).toBeUndefined();
    expect(options.server.modelMinResidencySecs).toBeUndefined();
    expect(options.server.gpuMemoryAdmission).toBeUndefined();
  });

  it("--gpu-memory-admission alone or with a boolean, with its reserve and wait (any control mode)", () => {
    expect(serve("--gpu-memory-admission")).toMatchObject({
      server: { gpuMemoryAdmission: { reserveBytes: 512 * 2 ** 20, waitSecs: 10 } },
    });
    expect(
      serve("--gpu-memory-admission=on", "--gpu-memory-reserve=2GiB", "--gpu-memory-wait-secs", "0"),
    ).toMatchObject({ server: { gpuMemoryAdmission: { reserveBytes: 2 * 2 ** 30, waitSecs: 0 } } });
    expect(serve("--gpu-memory-admission", "--gpu-memory-reserve=0")).toMatchObject({
      server: { gpuMemoryAdmission: { reserveBytes: 0 } },
    });
    const off = serve("--gpu-memory-admission=false");
    expect(off !== "help" && off.server.gpuMemoryAdmission).toBeUndefined();
  });

  it("--load-on-demand alone or with a boolean; the wait, the budget and the residency", () => {
    for (const flag of ["--load-on-demand", "--load-on-demand=true", "--load-on-demand=on", "--load-on-demand=1"]) {
      expect(serve(...explicit, flag)).toMatchObject({ server: { loadOnDemand: true } });
    }
    const off = serve(...explicit, "--load-on-demand=false");
    expect(off !== "help" && off.server.loadOnDemand).toBeFalsy();
    expect(
      serve(
        ...explicit,
        "--load-on-demand",
        "--load-on-demand-wait-secs=5",
        "--model-memory-budget=host:8GiB,gpu0:70GiB",
        "--model-memory-budget",
        "gpu1:1000",
        "--model-min-residency",
        "0",
      ),
    ).toMatchObject({
      server: {
        loadOnDemand: true,
        loadOnDemandWaitSecs: 5,
        modelMemoryBudget: {
          host: 8 * 2 ** 30,
          gpus: new Map([
            [0, 70 * 2 ** 30],
            [1, 1000],
          ]),
        },
        modelMinResidencySecs: 0,
      },
    });
  });

  it("sizes: bytes, binary and decimal units, case-insensitive, fractions", () => {
    expect(parseMemoryBudget(["host:1048576"])).toEqual({ host: 2 ** 20 });
    expect(parseMemoryBudget(["HOST:512mib"])).toEqual({ host: 512 * 2 ** 20 });
    expect(parseMemoryBudget(["host: 1.5GB"])).toEqual({ host: 1.5e9 });
    expect(parseMemoryBudget(["gpu3:2TiB"])).toEqual({ gpus: new Map([[3, 2 * 2 ** 40]]) });
  });

  it.each([
    [["--load-on-demand"], "--load-on-demand can only be used with --model-control-mode=explicit"],
    [
      ["--model-control-mode=poll", "--load-on-demand"],
      "--load-on-demand can only be used with --model-control-mode=explicit",
    ],
    [[...explicit, "--load-on-demand=maybe"], "invalid value for --load-on-demand: 'maybe'"],
    [[...explicit, "--model-memory-budget=host:1GiB"], "--model-memory-budget needs --load-on-demand"],
    [[...explicit, "--load-on-demand-wait-secs=5"], "--load-on-demand-wait-secs needs --load-on-demand"],
    [[...explicit, "--load-on-demand", "--model-min-residency=5"], "--model-min-residency needs --model-memory-budget"],
    [
      [...explicit, "--load-on-demand", "--load-on-demand-wait-secs=0"],
      "invalid value for --load-on-demand-wait-secs: '0'",
    ],
    [
      [...explicit, "--load-on-demand", "--load-on-demand-wait-secs=1e3"],
      "invalid value for --load-on-demand-wait-secs",
    ],
    [
      [...explicit, "--load-on-demand", "--model-memory-budget=host:1GiB", "--model-min-residency=-1"],
      "invalid value for --model-min-residency: '-1'",
    ],
    [
      [...explicit, "--load-on-demand", "--model-memory-budget=1GiB"],
      "invalid value for --model-memory-budget: '1GiB'",
    ],
    [
      [...explicit, "--load-on-demand", "--model-memory-budget=disk:1GiB"],
      "invalid value for --model-memory-budget: 'disk:1GiB'",
    ],
    [
      [...explicit, "--load-on-demand", "--model-memory-budget=gpu:1GiB"],
      "invalid value for --model-memory-budget: 'gpu:1GiB'",
    ],
    [
      [...explicit, "--load-on-demand", "--model-memory-budget=host:"],
      "invalid value for --model-memory-budget: 'host:'",
    ],
    [
      [...explicit, "--load-on-demand", "--model-memory-budget=host:0"],
      "invalid size in --model-memory-budget 'host:0'",
    ],
    [
      [...explicit, "--load-on-demand", "--model-memory-budget=host:-5"],
      "invalid size in --model-memory-budget 'host:-5'",
    ],
    [
      [...explicit, "--load-on-demand", "--model-memory-budget=host:1PiB"],
      "invalid size in --model-memory-budget 'host:1PiB'",
    ],
    [
      [...explicit, "--load-on-demand", "--model-memory-budget=host:0x10"],
      "invalid size in --model-memory-budget 'host:0x10'",
    ],
    [
      [...explicit, "--load-on-demand", "--model-memory-budget=host:1e30"],
      "invalid size in --model-memory-budget 'host:1e30'",
    ],
    [
      [...explicit, "--load-on-demand", "--model-memory-budget=host:99999999999TiB"],
      "invalid size in --model-memory-budget 'host:99999999999TiB'",
    ],
    [
      [...explicit, "--load-on-demand", "--model-memory-budget=host:1GiB,host:2GiB"],
      "--model-memory-budget gives host twice",
    ],
    [
      [...explicit, "--load-on-demand", "--model-memory-budget=gpu0:1GiB", "--model-memory-budget=gpu0:1GiB"],
      "gives gpu0 twice",
    ],
    [["--gpu-memory-admission=sometimes"], "invalid value for --gpu-memory-admission: 'sometimes'"],
    [["--gpu-memory-reserve=1GiB"], "--gpu-memory-reserve needs --gpu-memory-admission"],
    [["--gpu-memory-wait-secs=3"], "--gpu-memory-wait-secs needs --gpu-memory-admission"],
    [["--gpu-memory-admission", "--gpu-memory-reserve=lots"], "invalid size in --gpu-memory-reserve 'lots'"],
    [["--gpu-memory-admission", "--gpu-memory-reserve=-1"], "invalid size in --gpu-memory-reserve '-1'"],
    [["--gpu-memory-admission", "--gpu-memory-wait-secs=1.5"], "invalid value for --gpu-memory-wait-secs: '1.5'"],
  ])("%j is refused: %s", (flags, message) => {
    expect(() => serve(...flags)).toThrow(UsageError);
    expect(() => serve(...flags)).toThrow(message);
  });
});
