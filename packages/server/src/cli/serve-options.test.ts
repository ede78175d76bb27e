import { describe, expect, it } from "vitest";
import { DEFAULT_OPENTELEMETRY_CONFIG } from "../core/opentelemetry-config.js";
import { parseServeArgs, SERVE_USAGE, UsageError } from "./serve-options.js";
import { parseTraceConfig } from "./trace-options.js";

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

  it("turns the first-response histogram on for histogram_latencies=true exactly, as Triton's core does", () => {
    const metrics = (...args: string[]) => {
      const options = parseServeArgs(["--model-repository=/m", ...args]);
      return options === "help" ? undefined : options.server.metrics;
    };
    expect(metrics()).toMatchObject({ histogramLatencies: false });
    expect(metrics("--metrics-config=histogram_latencies=true")).toMatchObject({ histogramLatencies: true });
    // Triton compares with "true": anything else leaves the histograms off, without an error.
    expect(metrics("--metrics-config=histogram_latencies=1")).toMatchObject({ histogramLatencies: false });
    expect(
      metrics("--metrics-config=histogram_latencies=true", "--metrics-config=histogram_latencies=false"),
    ).toMatchObject({ histogramLatencies: false });
    // No longer among the settings Galley accepts without using.
    const options = parseServeArgs(["--model-repository=/m", "--metrics-config=histogram_latencies=true"]);
    expect(options !== "help" && options.warnings.filter((w) => w.includes("histogram_latencies"))).toEqual([]);
    for (const bad of ["histogram_latencies", "histogram_latencies=", "=true", "group,histogram_latencies=true"]) {
      expect(() => parseServeArgs(["--model-repository=/m", `--metrics-config=${bad}`])).toThrow(
        `Bad option: "--metrics-config".\n--metrics-config option format is <setting>=<value>. Got ${bad}`,
      );
    }
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
      [
        ["--model-repository=/m", "--metrics-config=summary_latencies"],
        /--metrics-config option format is <setting>=<value>/,
      ],
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
      ["mode=jaeger", /Bad option: "--trace-config mode".\ninvalid value for trace mode option: jaeger/],
    ];
    for (const [spec, message] of cases) expect(() => trace(`--trace-config=${spec}`), spec).toThrow(message);
    expect(SERVE_USAGE).toMatch(/--trace-config triton,file=<path>/);
    expect(SERVE_USAGE).toMatch(/--trace-config opentelemetry,url=/);
  });

  it("reads mode opentelemetry's settings as tritonserver does: url, resource, the batch span processor's (flags over OTEL_BSP_*)", () => {
    const otel = (specs: string[], env: Record<string, string> = {}, deprecated = {}) =>
      parseTraceConfig(["mode=opentelemetry", ...specs], deprecated, env);
    expect(otel([]).config).toEqual({
      mode: "opentelemetry",
      opentelemetry: DEFAULT_OPENTELEMETRY_CONFIG,
      extra: [
        ["bsp_max_queue_size", "2048"],
        ["bsp_schedule_delay", "5000"],
        ["bsp_max_export_batch_size", "512"],
      ],
    });
    const given = otel(
      [
        "level=TIMESTAMPS",
        "rate=1",
        "count=5",
        "opentelemetry,url=localhost:4318/v1/traces",
        "opentelemetry,resource=service.name=galley",
        "opentelemetry,resource=deployment.environment=test=1",
        "opentelemetry,bsp_max_queue_size=10",
        "triton,file=/tmp/ignored.json",
      ],
      { OTEL_BSP_MAX_QUEUE_SIZE: "99", OTEL_BSP_SCHEDULE_DELAY: "20" },
      { file: "/tmp/old.json" },
    );
    expect(given.config).toMatchObject({
      level: 0x4,
      rate: 1,
      count: 5,
      opentelemetry: {
        url: "localhost:4318/v1/traces",
        resource: [
          ["service.name", "galley"],
          ["deployment.environment", "test=1"],
        ],
        bspMaxQueueSize: 10,
        bspScheduleDelay: 20,
        bspMaxExportBatchSize: 512,
      },
    });
    expect(given.config.file).toBeUndefined();
    expect(given.warnings).toContain(
      "Warning: '--trace-file' is deprecated and will be ignored with opentelemetry tracing mode. ",
    );
    expect(otel(["level=TENSORS"]).warnings).toContain(
      "Tensor level tracing is not supported by the mode: opentelemetry",
    );
    // Mode triton ignores the opentelemetry entries.
    expect(parseTraceConfig(["opentelemetry,bsp_max_queue_size=x"], {}, {}).config).toEqual({});
    const bad: [string[], Record<string, string>, string][] = [
      [
        ["opentelemetry,bsp_max_queue_size=ten"],
        {},
        'Bad option: "--trace-config opentelemetry,bsp_max_queue_size".\nInvalid option value. Got ten',
      ],
      [
        ["opentelemetry,bsp_schedule_delay=4294967296"],
        {},
        'Bad option: "--trace-config opentelemetry,bsp_schedule_delay".\nProvided option value is out of bound. Got 4294967296',
      ],
      [
        [],
        { OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "-1" },
        'Bad option: "OTEL_BSP_MAX_EXPORT_BATCH_SIZE".\nInvalid option value. Got -1',
      ],
      [["opentelemetry,resource=novalue"], {}, "expected <key>=<value>, got 'novalue'"],
      [["opentelemetry,url=http://[bad"], {}, 'Bad option: "--trace-config opentelemetry,url".\ninvalid OTLP/HTTP url'],
      [["opentelemetry,url=ftp://host/traces"], {}, "invalid OTLP/HTTP url 'ftp://host/traces'"],
      [["opentelemetry,url=http://"], {}, "invalid OTLP/HTTP url 'http://'"],
    ];
    for (const [specs, env, message] of bad) expect(() => otel(specs, env), message).toThrow(message);
  });

  describe("tritonserver flags Galley takes without a use of its own", () => {
    const serve = (...args: string[]) => {
      const parsed = parseServeArgs(["--model-repository=/m", ...args]);
      if (parsed === "help") throw new Error("help");
      return parsed;
    };

    it("starts NVIDIA's bls suite command line: --cuda-memory-pool-byte-size is checked and reported once", () => {
      const options = serve(
        "--backend-directory=/opt/tritonserver/backends",
        "--log-verbose=1",
        "--cuda-memory-pool-byte-size=0:67108864",
        "--cuda-memory-pool-byte-size=1:268435456",
      );
      expect(options.logVerbose).toBe(1);
      const lines = options.warnings.filter((w) => w.includes("cuda-memory-pool-byte-size"));
      expect(lines).toEqual([
        "--cuda-memory-pool-byte-size=0:67108864 --cuda-memory-pool-byte-size=1:268435456: accepted, not used by " +
          "Galley (Galley has no CUDA memory pool: GPU tensors are allocated by the backend or client that makes them)",
      ]);
    });

    it("reads each value as tritonserver does, with its error texts", () => {
      const cases: [string, string][] = [
        [
          "--cuda-memory-pool-byte-size=67108864",
          'Bad option: "--cuda-memory-pool-byte-size".\nCannot parse pair option due to incorrect number of inputs.' +
            "--<pair option> argument requires format <first>:<second>. Found: 67108864",
        ],
        [
          "--cuda-memory-pool-byte-size=gpu0:1",
          'Bad option: "--cuda-memory-pool-byte-size".\nInvalid option value. Got gpu0',
        ],
        [
          "--cuda-memory-pool-byte-size=0:18446744073709551616",
          'Bad option: "--cuda-memory-pool-byte-size".\nProvided option value is out of bound. Got 18446744073709551616',
        ],
        [
          "--pinned-memory-pool-byte-size=lots",
          'Bad option: "--pinned-memory-pool-byte-size".\nInvalid option value. Got lots',
        ],
        ["--min-supported-compute-capability=high", "Invalid option value. Got high"],
        ["--min-supported-compute-capability=1e999", "Provided option value is out of bound. Got 1e999"],
        ["--buffer-manager-thread-count=2147483648", "Provided option value is out of bound. Got 2147483648"],
        ["--model-load-retry-count=x", 'Bad option: "--model-load-retry-count".\nInvalid option value. Got x'],
        ["--reuse-http-port=maybe", 'Bad option: "--reuse-http-port".\ninvalid value for bool option: maybe'],
        [
          "--grpc-infer-thread-count=1",
          "invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128.",
        ],
        ["--grpc-max-response-pool-size=0", "Error: --grpc-max-response-pool-size must be greater than 0."],
        ["--grpc-infer-response-compression-level=max", "invalid argument for --grpc_infer_response_compression_level"],
        ["--host-policy=gpu0", "--host-policy option format is '<policy name>,<setting>=<value>'. Got gpu0"],
        [
          "--host-policy=gpu0,numa-node=",
          "--host-policy option format is '<policy name>,<setting>=<value>'. Got gpu0,numa-node=",
        ],
        [
          "--host-policy=gpu0,gpu-id=1",
          "Unsupported host policy setting 'gpu-id' is specified, supported settings are 'numa-node', 'cpu-cores'",
        ],
        ["--model-load-gpu-limit=0", "requires format <first>:<second>. Found: 0"],
        ["--sagemaker-safe-port-range=8000:8002", "requires format <first>-<second>. Found: 8000:8002"],
        ["--log-verbose=loud", 'Bad option: "--log-verbose".\nInvalid option value. Got loud'],
      ];
      for (const [arg, message] of cases) {
        expect(() => serve(arg), arg).toThrow(UsageError);
        expect(() => serve(arg), arg).toThrow(message);
      }
    });

    it("takes what std::stoi, std::stoull and std::stod take", () => {
      // stoi reads the leading number (" 12abc" is 12); stoull wraps a negative value around.
      expect(serve("--model-load-retry-count= 2x").server.modelLoadRetries).toBe(2);
      expect(serve("--cuda-memory-pool-byte-size=0:-1").warnings.join()).toContain("cuda-memory-pool-byte-size=0:-1");
      expect(serve("--min-supported-compute-capability=7.5").warnings.join()).toContain(
        "does not read compute capability",
      );
      expect(serve("--min-supported-compute-capability=inf").warnings).toHaveLength(1);
      expect(serve("--model-load-gpu-limit=0:0.8", "--host-policy=gpu_0,numa-node=0").warnings).toHaveLength(2);
    });

    it("applies --log-file, --model-load-retry-count, --allow-cpu-metrics and --log-verbose's forms", () => {
      const options = serve(
        "--log-file=/var/log/galley.log",
        "--model-load-retry-count=3",
        "--allow-cpu-metrics=false",
        "--log-verbose=true",
      );
      expect(options.logFile).toBe("/var/log/galley.log");
      expect(options.server.modelLoadRetries).toBe(3);
      expect(options.server.metrics).toMatchObject({ allowCpuMetrics: false });
      expect(options.logVerbose).toBe(1);
      expect(options.warnings).toEqual([]);
      expect(serve("--log-verbose=FALSE").logVerbose).toBe(0);
      expect(serve("--log-verbose=-3").logVerbose).toBe(0);
      expect(serve("--log-verbose=2").logVerbose).toBe(2);
      expect(serve("--model-load-retry-count=-1").server.modelLoadRetries).toBeUndefined();
    });

    it("does not report values that ask for what Galley does anyway", () => {
      expect(
        serve(
          "--reuse-http-port=false",
          "--reuse-grpc-port=0",
          "--enable-peer-access=false",
          "--grpc-infer-response-compression-level=NONE",
          "--model-namespacing=false",
          "--grpc-use-ssl=false",
          "--allow-sagemaker=false",
          "--allow-vertex-ai=off",
        ).warnings,
      ).toEqual([]);
    });

    it("reports every other accepted flag once, naming it and why it has no effect", () => {
      const args = [
        "--pinned-memory-pool-byte-size=268435456",
        "--cuda-virtual-address-size=0:1073741824",
        "--buffer-manager-thread-count=4",
        "--enable-peer-access=true",
        "--repoagent-directory=/opt/tritonserver/repoagents",
        "--cache-directory=/opt/tritonserver/caches",
        "--reuse-http-port=true",
        "--reuse-grpc-port=true",
        "--http-thread-count=8",
        "--http-header-forward-pattern=x-.*",
        "--grpc-header-forward-pattern=x-.*",
        "--grpc-infer-thread-count=4",
        "--grpc-infer-allocation-pool-size=16",
        "--grpc-max-response-pool-size=8",
        "--grpc-infer-response-compression-level=high",
        "--grpc-server-cert=/c.pem",
        "--grpc-server-key=/k.pem",
        "--grpc-root-cert=/r.pem",
        "--grpc-keepalive-permit-without-calls=1",
        "--grpc-http2-max-pings-without-data=0",
        "--grpc-http2-min-recv-ping-interval-without-data=5000",
        "--grpc-http2-max-ping-strikes=0",
        "--grpc-max-connection-age=60000",
        "--grpc-max-connection-age-grace=5000",
        "--sagemaker-port=8080",
        "--sagemaker-safe-port-range=8000-8002",
        "--sagemaker-thread-count=8",
        "--vertex-ai-port=8080",
        "--vertex-ai-thread-count=8",
        "--vertex-ai-default-model=m",
        "--metrics-config=summary_latencies=true",
        "--metrics-config=summary_quantiles=0.5:0.05,0.9:0.01",
      ];
      const warnings = serve(...args).warnings;
      expect(warnings).toHaveLength(args.length - 1);
      for (const arg of args)
        expect(
          warnings.filter((w) => w.includes(arg)),
          arg,
        ).toHaveLength(1);
      for (const warning of warnings) expect(warning).toMatch(/: accepted, not used by Galley \(.+\)$/);
    });

    it("refuses values that ask for what Galley cannot do, saying so, instead of silently not doing it", () => {
      expect(() => serve("--grpc-use-ssl=true", "--grpc-server-cert=/c.pem")).toThrow(
        /--grpc-use-ssl: TLS is not supported by Galley's gRPC endpoint, which serves plaintext HTTP\/2 only/,
      );
      // As in tritonserver, --grpc-use-ssl-mutual turns SSL on whatever its value.
      expect(() => serve("--grpc-use-ssl-mutual=false")).toThrow(/--grpc-use-ssl-mutual: TLS is not supported/);
      expect(() => serve("--model-namespacing=true")).toThrow(/--model-namespacing=true is not supported by Galley/);
      expect(() => serve("--allow-sagemaker=true")).toThrow(/Galley has no SageMaker endpoint/);
      expect(() => serve("--allow-vertex-ai=1")).toThrow(/Galley has no Vertex AI endpoint/);
    });

    it("lists every tritonserver flag in --help", () => {
      for (const flag of [
        "log-file",
        "cuda-memory-pool-byte-size <integer>:<integer>",
        "pinned-memory-pool-byte-size <integer>",
        "min-supported-compute-capability <float>",
        "model-load-retry-count",
        "model-namespacing",
        "allow-cpu-metrics",
        "grpc-use-ssl",
        "host-policy <string>,<string>=<string>",
        "grpc-max-connection-age-grace",
        "vertex-ai-default-model",
      ]) {
        expect(SERVE_USAGE).toContain(`--${flag}`);
      }
    });
  });
});
