import { describe, expect, it } from "vitest";
import { parseServeArgs, SERVE_USAGE, UsageError } from "./serve-options.js";

describe("galley serve flags (tritonserver's names and defaults)", () => {
  it("defaults to Triton's ports, id, modes and timeouts", () => {
    const options = parseServeArgs(["--model-repository", "/models"]);
    expect(options).toMatchObject({
      server: {
        modelRepositories: ["/models"],
        id: "triton",
        http: {
          host: "0.0.0.0",
          port: 8000,
          maxInputSize: 64 * 1024 * 1024,
          restricted: [],
          headerTimeoutMs: 60_000,
          idleTimeoutMs: 60_000,
          keepAliveTimeoutMs: 5_000,
        },
        grpc: { host: "0.0.0.0", port: 8001, keepaliveTimeMs: 7_200_000, keepaliveTimeoutMs: 20_000 },
        metrics: { host: "0.0.0.0", port: 8002, counterLatencies: true },
        controlMode: "none",
        loadModels: [],
        pollSecs: 15,
        strictReadiness: true,
        autoComplete: true,
        modelLoadThreads: 4,
        exitTimeoutSecs: 30,
      },
      exitOnError: true,
      logVerbose: 0,
      logFormat: "default",
      logInfo: true,
    });
  });

  it("reads model control, restricted APIs, metrics config and backend config", () => {
    const options = parseServeArgs([
      "--model-repository=/m",
      "--model-control-mode=explicit",
      "--load-model=simple",
      "--load-model",
      "densenet",
      "--http-restricted-api=model-repository,inference:admin-key=secret",
      "--grpc-restricted-protocol=health:probe=1",
      "--metrics-config=counter_latencies=false",
      "--backend-config=onnxruntime,default-max-batch-size=16",
      "--backend-config=python,python-executable=/opt/env/bin/python3",
      "--strict-model-config=true",
    ]);
    expect(options).toMatchObject({
      server: {
        controlMode: "explicit",
        loadModels: ["simple", "densenet"],
        http: { restricted: [{ apis: ["model-repository", "inference"], key: "admin-key", value: "secret" }] },
        grpc: { restricted: [{ protocols: ["health"], key: "probe", value: "1" }] },
        metrics: { counterLatencies: false },
        onnxDefaultMaxBatchSize: 16,
        pythonExecutable: "/opt/env/bin/python3",
        autoComplete: false,
      },
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
    expect(options !== "help" && options.server.modelRepositories).toEqual(["/a", "/c", "/b"]);
    expect(options !== "help" && options.server.http).toMatchObject({ host: "0.0.0.0", port: 0 });
  });

  it("reads the HTTP connection time limits in seconds; 0 turns one off", () => {
    const options = parseServeArgs([
      "--model-repository=/m",
      "--http-header-timeout-secs=10",
      "--http-idle-timeout-secs",
      "0",
      "--http-keepalive-timeout-secs=75",
    ]);
    expect(options !== "help" && options.server.http).toMatchObject({
      headerTimeoutMs: 10_000,
      idleTimeoutMs: 0,
      keepAliveTimeoutMs: 75_000,
    });
    expect(() => parseServeArgs(["--model-repository=/m", "--http-idle-timeout-secs=-1"])).toThrow(
      /--http-idle-timeout-secs: '-1'/,
    );
  });

  it("reads the gRPC idle limit in seconds (default 300); 0 turns it off", () => {
    const defaults = parseServeArgs(["--model-repository=/m"]);
    expect(defaults !== "help" && defaults.server.grpc).toMatchObject({ idleTimeoutMs: 300_000 });
    const options = parseServeArgs(["--model-repository=/m", "--grpc-idle-timeout-secs", "0"]);
    expect(options !== "help" && options.server.grpc).toMatchObject({ idleTimeoutMs: 0 });
    expect(() => parseServeArgs(["--model-repository=/m", "--grpc-idle-timeout-secs=1.5"])).toThrow(
      /--grpc-idle-timeout-secs: '1.5'/,
    );
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
      [["--model-repository=/m", "--model-control-mode=sometimes"], /--model-control-mode: 'sometimes'/],
      [
        ["--model-repository=/m", "--load-model=simple"],
        /--load-model can only be used with --model-control-mode=explicit/,
      ],
      [["--model-repository=/m", "--http-restricted-api=everything:k=v"], /unknown API 'everything'/],
      [["--model-repository=/m", "--metrics-config=summary_latencies=true"], /unsupported --metrics-config/],
    ];
    for (const [args, message] of cases) {
      expect(() => parseServeArgs(args)).toThrow(UsageError);
      expect(() => parseServeArgs(args)).toThrow(message);
    }
  });

  it("answers --help", () => {
    expect(parseServeArgs(["--help"])).toBe("help");
  });

  it("reads --allow-gpu-metrics and --metrics-interval-ms (Triton's defaults: true, 2000) and lists them in --help", () => {
    const defaults = parseServeArgs(["--model-repository=/m"]);
    expect(defaults !== "help" && defaults.server.metrics).toMatchObject({ allowGpuMetrics: true, intervalMs: 2000 });
    const set = parseServeArgs(["--model-repository=/m", "--allow-gpu-metrics=false", "--metrics-interval-ms", "500"]);
    expect(set !== "help" && set.server.metrics).toMatchObject({ allowGpuMetrics: false, intervalMs: 500 });
    expect(() => parseServeArgs(["--model-repository=/m", "--allow-gpu-metrics=sometimes"])).toThrow(
      /--allow-gpu-metrics: 'sometimes'/,
    );
    for (const bad of ["0", "-5", "1.5", "soon"]) {
      expect(() => parseServeArgs(["--model-repository=/m", `--metrics-interval-ms=${bad}`])).toThrow(
        new RegExp(`--metrics-interval-ms: '${bad}'`),
      );
    }
    expect(SERVE_USAGE).toMatch(/--allow-gpu-metrics <bool> .*\(default: true\)/);
    expect(SERVE_USAGE).toMatch(/--metrics-interval-ms <ms> .*\(default: 2000\)/);
  });

  it("reads --trace-config as tritonserver does, and the deprecated --trace-* flags with Triton's warnings", () => {
    const trace = (...args: string[]) => {
      const parsed = parseServeArgs(["--model-repository=/m", ...args]);
      if (parsed === "help") throw new Error("help");
      return { config: parsed.server.trace, warnings: parsed.warnings };
    };
    expect(trace().config).toEqual({});
    expect(
      trace(
        "--trace-config=triton,file=/tmp/t.json",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=level=tensors",
        "--trace-config=level=OFF",
        "--trace-config=rate=10",
        "--trace-config=count=-1",
        "--trace-config=triton,log-frequency=5",
        "--trace-config=triton,extra=x",
        "--trace-config=opentelemetry,url=localhost:4318",
      ).config,
    ).toEqual({ file: "/tmp/t.json", level: 0xc, rate: 10, count: -1, logFrequency: 5, extra: [["extra", "x"]] });
    const old = trace("--trace-file=/tmp/a", "--trace-level=MAX", "--trace-rate=4", "--trace-config=rate=8");
    expect(old.config).toEqual({ file: "/tmp/a", level: 0x4, rate: 8 });
    expect(old.warnings).toContain(
      "Overriding deprecated '--trace-rate' in favor of provided rate value in --trace-config!",
    );
    expect(old.warnings.filter((w) => w.includes("has been deprecated"))).toHaveLength(3);
    const cases: [string, RegExp][] = [
      [",rate=1", /No trace mode specified/],
      ["rate", /--trace-config option format is '<trace mode>,<setting>=<value>'. Got rate/],
      ["jaeger,url=x", /invalid value for trace mode option: jaeger/],
      ["level=loud", /invalid value for trace level option: loud/],
      ["rate=-1", /Bad option: "--trace-config rate"/],
      ["count=-2", /Bad option: "--trace-config count"/],
      ["mode=opentelemetry", /not supported by this server/],
    ];
    for (const [spec, message] of cases) expect(() => trace(`--trace-config=${spec}`), spec).toThrow(message);
    expect(SERVE_USAGE).toMatch(/--trace-config triton,file=<path>/);
  });
});
