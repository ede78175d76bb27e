import { describe, expect, it } from "vitest";
import { parseServeArgs, UsageError } from "./serve-options.js";

describe("galley serve flags (tritonserver's names and defaults)", () => {
  it("defaults to Triton's ports, id and exit timeout", () => {
    expect(parseServeArgs(["--model-repository", "/models"])).toEqual({
      modelRepositories: ["/models"],
      server: {
        id: "triton",
        http: { host: "0.0.0.0", port: 8000 },
        grpc: { host: "0.0.0.0", port: 8001 },
        exitTimeoutSecs: 30,
      },
      logVerbose: 0,
      logFormat: "default",
    });
  });

  it("takes repeated repositories, --model-store, and --flag=value spelling", () => {
    const options = parseServeArgs([
      "--model-repository=/a",
      "--model-store",
      "/b",
      "--model-repository",
      "/c",
      "--http-port=0",
    ]);
    expect(options !== "help" && options.modelRepositories).toEqual(["/a", "/c", "/b"]);
    expect(options !== "help" && options.server.http).toEqual({ host: "0.0.0.0", port: 0 });
  });

  it("reads booleans as Triton does: true/on/1, false/off/0, any case", () => {
    for (const off of ["false", "OFF", "0"]) {
      const options = parseServeArgs(["--model-repository=/m", `--allow-http=${off}`, "--allow-grpc", "On"]);
      expect(options !== "help" && [options.server.http, options.server.grpc !== false]).toEqual([false, true]);
    }
  });

  it("rejects what Triton rejects, with a message naming the flag", () => {
    const cases: [string[], RegExp][] = [
      [[], /--model-repository must be specified/],
      [["--model-repository=/m", "--allow-http=maybe"], /--allow-http: 'maybe'/],
      [["--model-repository=/m", "--http-port=65536"], /--http-port: '65536'/],
      [["--model-repository=/m", "--grpc-port=80a"], /--grpc-port: '80a'/],
      [["--model-repository=/m", "--log-format=json"], /--log-format: 'json'/],
      [["--model-repository=/m", "--no-such-flag"], /no-such-flag/],
      [["--model-repository=/m", "positional"], /positional/],
    ];
    for (const [args, message] of cases) {
      expect(() => parseServeArgs(args)).toThrow(UsageError);
      expect(() => parseServeArgs(args)).toThrow(message);
    }
  });

  it("answers --help", () => {
    expect(parseServeArgs(["--help"])).toBe("help");
  });
});
