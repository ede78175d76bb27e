// tritonserver flags that mean little or nothing in Galley, taken so that command lines written for
// tritonserver (deploy scripts, NVIDIA's QA) start: each value is read and checked exactly as
// tritonserver reads it (`triton-values.ts`), the few that mean something here are applied, the
// others are reported once at startup as accepted and not used. A flag whose value asks for
// something Galley cannot do and would otherwise silently not do (TLS, model namespacing, a
// SageMaker or Vertex AI endpoint) is refused, saying so.

import {
  TritonValueError,
  tritonBool,
  tritonDouble,
  tritonGeneric,
  tritonInt,
  tritonInt64,
  tritonPair,
  tritonUint64,
} from "./triton-values.js";

/** `parseArgs` options for the flags read here. */
export const TRITON_ONLY_OPTIONS = {
  "log-file": { type: "string" },
  "model-load-retry-count": { type: "string" },
  "model-namespacing": { type: "string" },
  "enable-peer-access": { type: "string" },
  "allow-cpu-metrics": { type: "string" },
  "pinned-memory-pool-byte-size": { type: "string" },
  "cuda-memory-pool-byte-size": { type: "string", multiple: true },
  "cuda-virtual-address-size": { type: "string", multiple: true },
  "min-supported-compute-capability": { type: "string" },
  "buffer-manager-thread-count": { type: "string" },
  "host-policy": { type: "string", multiple: true },
  "model-load-gpu-limit": { type: "string", multiple: true },
  "repoagent-directory": { type: "string" },
  "cache-directory": { type: "string" },
  "reuse-http-port": { type: "string" },
  "http-thread-count": { type: "string" },
  "http-header-forward-pattern": { type: "string" },
  "reuse-grpc-port": { type: "string" },
  "grpc-header-forward-pattern": { type: "string" },
  "grpc-infer-thread-count": { type: "string" },
  "grpc-infer-allocation-pool-size": { type: "string" },
  "grpc-max-response-pool-size": { type: "string" },
  "grpc-use-ssl": { type: "string" },
  "grpc-use-ssl-mutual": { type: "string" },
  "grpc-server-cert": { type: "string" },
  "grpc-server-key": { type: "string" },
  "grpc-root-cert": { type: "string" },
  "grpc-infer-response-compression-level": { type: "string" },
  "grpc-keepalive-permit-without-calls": { type: "string" },
  "grpc-http2-max-pings-without-data": { type: "string" },
  "grpc-http2-min-recv-ping-interval-without-data": { type: "string" },
  "grpc-http2-max-ping-strikes": { type: "string" },
  "grpc-max-connection-age": { type: "string" },
  "grpc-max-connection-age-grace": { type: "string" },
  "allow-sagemaker": { type: "string" },
  "sagemaker-port": { type: "string" },
  "sagemaker-safe-port-range": { type: "string" },
  "sagemaker-thread-count": { type: "string" },
  "allow-vertex-ai": { type: "string" },
  "vertex-ai-port": { type: "string" },
  "vertex-ai-thread-count": { type: "string" },
  "vertex-ai-default-model": { type: "string" },
} as const;

type Values = {
  [K in keyof typeof TRITON_ONLY_OPTIONS]?: (typeof TRITON_ONLY_OPTIONS)[K] extends { multiple: true }
    ? string[]
    : string;
};

/** What the flags read here set. */
export interface TritonOnlyFlags {
  /** `--log-file`: where the log goes instead of stderr ("" or absent: stderr). */
  logFile?: string;
  /** `--model-load-retry-count` (default 0). */
  modelLoadRetries?: number;
  /** `--allow-cpu-metrics` (default true). */
  allowCpuMetrics?: boolean;
  /** One line per flag accepted and not used, to log once at startup. */
  unused: string[];
}

/** Why each flag Galley accepts without using it has no effect here. */
const NOT_USED: Record<string, string> = {
  "enable-peer-access": "Galley does not enable CUDA peer access between GPUs",
  "pinned-memory-pool-byte-size": "Galley has no pinned host memory pool to size",
  "cuda-memory-pool-byte-size":
    "Galley has no CUDA memory pool: GPU tensors are allocated by the backend or client that makes them",
  "cuda-virtual-address-size": "Galley has no growable CUDA memory for implicit state",
  "min-supported-compute-capability":
    "Galley's GPU discovery does not read compute capability; it uses every GPU the CUDA driver reports",
  "buffer-manager-thread-count": "Galley copies tensors on the threads that need them, with no buffer-manager pool",
  "host-policy": "Galley does not pin work to NUMA nodes or CPU cores",
  "model-load-gpu-limit": "Galley does not check GPU memory use before a load",
  "repoagent-directory": "Galley has no repository agents",
  "cache-directory": "Galley's response cache is its built-in local one (--cache-config local,size=N)",
  "reuse-http-port": "Galley does not set SO_REUSEPORT: a second server on the same HTTP port fails to bind",
  "http-thread-count": "Galley serves HTTP on Node's event loop",
  "http-header-forward-pattern": "Galley does not forward HTTP headers as request parameters",
  "reuse-grpc-port": "Galley does not set SO_REUSEPORT: a second server on the same gRPC port fails to bind",
  "grpc-header-forward-pattern": "Galley does not forward gRPC headers as request parameters",
  "grpc-infer-thread-count": "Galley serves gRPC on Node's event loop",
  "grpc-infer-allocation-pool-size": "Galley keeps no pool of gRPC request states",
  "grpc-max-response-pool-size": "Galley keeps no pool of gRPC responses",
  "grpc-server-cert": "ignored unless --grpc-use-ssl is true, which Galley does not support",
  "grpc-server-key": "ignored unless --grpc-use-ssl is true, which Galley does not support",
  "grpc-root-cert": "ignored unless --grpc-use-ssl is true, which Galley does not support",
  "grpc-infer-response-compression-level": "Galley's gRPC answers inference uncompressed",
  "grpc-keepalive-permit-without-calls": "Galley's HTTP/2 keepalive uses --grpc-keepalive-time and -timeout only",
  "grpc-http2-max-pings-without-data": "Galley does not limit pings without data",
  "grpc-http2-min-recv-ping-interval-without-data": "Galley does not count ping strikes",
  "grpc-http2-max-ping-strikes": "Galley does not count ping strikes",
  "grpc-max-connection-age": "Galley does not age gRPC connections out (see --grpc-idle-timeout-secs)",
  "grpc-max-connection-age-grace": "Galley does not age gRPC connections out (see --grpc-idle-timeout-secs)",
  "sagemaker-port": "Galley has no SageMaker endpoint",
  "sagemaker-safe-port-range": "Galley has no SageMaker endpoint",
  "sagemaker-thread-count": "Galley has no SageMaker endpoint",
  "vertex-ai-port": "Galley has no Vertex AI endpoint",
  "vertex-ai-thread-count": "Galley has no Vertex AI endpoint",
  "vertex-ai-default-model": "Galley has no Vertex AI endpoint",
};

/** How each accepted flag's value is checked: tritonserver's parse of it. */
const CHECKS: Record<string, (flag: string, value: string) => unknown> = {
  "enable-peer-access": tritonBool,
  "pinned-memory-pool-byte-size": tritonInt64,
  "cuda-memory-pool-byte-size": (flag, value) => tritonPair(flag, value, ":", tritonInt, tritonUint64),
  "cuda-virtual-address-size": (flag, value) => tritonPair(flag, value, ":", tritonInt, tritonUint64),
  "min-supported-compute-capability": tritonDouble,
  "buffer-manager-thread-count": tritonInt,
  "host-policy": (flag, value) => {
    const [, setting] = tritonGeneric(flag, value, ",", "=", "policy name");
    // Triton's core refuses other settings when the options are built (`SetHostPolicy`).
    if (setting !== "numa-node" && setting !== "cpu-cores") {
      throw new Error(
        `error: setting host policy: Unsupported - Unsupported host policy setting '${setting}' is specified, supported settings are 'numa-node', 'cpu-cores'`,
      );
    }
  },
  "model-load-gpu-limit": (flag, value) => tritonPair(flag, value, ":", tritonInt, tritonDouble),
  "repoagent-directory": () => undefined,
  "cache-directory": () => undefined,
  "reuse-http-port": tritonBool,
  "http-thread-count": tritonInt,
  "http-header-forward-pattern": () => undefined,
  "reuse-grpc-port": tritonBool,
  "grpc-header-forward-pattern": () => undefined,
  "grpc-infer-thread-count": (flag, value) => {
    const n = tritonInt(flag, value);
    if (n < 2 || n > 128) {
      throw new TritonValueError(
        flag,
        "invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128.",
      );
    }
  },
  "grpc-infer-allocation-pool-size": tritonInt,
  "grpc-max-response-pool-size": (flag, value) => {
    if (tritonInt(flag, value) <= 0) {
      throw new TritonValueError(flag, "Error: --grpc-max-response-pool-size must be greater than 0.");
    }
  },
  "grpc-server-cert": () => undefined,
  "grpc-server-key": () => undefined,
  "grpc-root-cert": () => undefined,
  "grpc-infer-response-compression-level": (flag, value) => {
    if (!["none", "low", "medium", "high"].includes(value.toLowerCase())) {
      throw new TritonValueError(flag, "invalid argument for --grpc_infer_response_compression_level");
    }
  },
  "grpc-keepalive-permit-without-calls": tritonBool,
  "grpc-http2-max-pings-without-data": tritonInt,
  "grpc-http2-min-recv-ping-interval-without-data": tritonInt,
  "grpc-http2-max-ping-strikes": tritonInt,
  "grpc-max-connection-age": tritonInt,
  "grpc-max-connection-age-grace": tritonInt,
  "sagemaker-port": tritonInt,
  "sagemaker-safe-port-range": (flag, value) => tritonPair(flag, value, "-", tritonInt, tritonInt),
  "sagemaker-thread-count": tritonInt,
  "vertex-ai-port": tritonInt,
  "vertex-ai-thread-count": tritonInt,
  "vertex-ai-default-model": () => undefined,
};

/** Values that ask for nothing Galley does not do: given alone, they are not reported. */
const HARMLESS: Record<string, (value: string) => boolean> = {
  "enable-peer-access": (v) => !tritonBool("enable-peer-access", v),
  "reuse-http-port": (v) => !tritonBool("reuse-http-port", v),
  "reuse-grpc-port": (v) => !tritonBool("reuse-grpc-port", v),
  "grpc-infer-response-compression-level": (v) => v.toLowerCase() === "none",
};

/**
 * Read the tritonserver flags of {@link TRITON_ONLY_OPTIONS}.
 * @throws TritonValueError (or Error) with tritonserver's text for a value it refuses, and Error
 * for a value asking for what Galley cannot do.
 */
export function readTritonOnlyFlags(values: Values): TritonOnlyFlags {
  const flags: TritonOnlyFlags = { unused: [] };
  const logFile = values["log-file"];
  if (logFile) flags.logFile = logFile;
  const retries = values["model-load-retry-count"];
  if (retries !== undefined) flags.modelLoadRetries = Math.max(0, tritonInt("model-load-retry-count", retries));
  const cpuMetrics = values["allow-cpu-metrics"];
  if (cpuMetrics !== undefined) flags.allowCpuMetrics = tritonBool("allow-cpu-metrics", cpuMetrics);
  const namespacing = values["model-namespacing"];
  if (namespacing !== undefined && tritonBool("model-namespacing", namespacing)) {
    throw new Error(
      "--model-namespacing=true is not supported by Galley: a model name must be unique across all model " +
        "repositories (a name found in two fails to load), as with Triton's default --model-namespacing=false",
    );
  }
  const ssl = values["grpc-use-ssl"] !== undefined && tritonBool("grpc-use-ssl", values["grpc-use-ssl"]);
  const mutual = values["grpc-use-ssl-mutual"] !== undefined;
  if (mutual) tritonBool("grpc-use-ssl-mutual", values["grpc-use-ssl-mutual"] as string);
  // As in tritonserver, --grpc-use-ssl-mutual turns SSL on whatever its value.
  if (ssl || mutual) {
    throw new Error(
      `--${mutual ? "grpc-use-ssl-mutual" : "grpc-use-ssl"}: TLS is not supported by Galley's gRPC endpoint, which ` +
        "serves plaintext HTTP/2 only; terminate TLS in front of it (a proxy or service mesh) and drop the flag",
    );
  }
  for (const [flag, endpoint] of [
    ["allow-sagemaker", "SageMaker"],
    ["allow-vertex-ai", "Vertex AI"],
  ] as const) {
    const value = values[flag];
    if (value !== undefined && tritonBool(flag, value)) {
      throw new Error(`--${flag}=true is not supported: Galley has no ${endpoint} endpoint`);
    }
  }
  for (const [flag, check] of Object.entries(CHECKS)) {
    const given = values[flag as keyof Values];
    if (given === undefined) continue;
    const list = Array.isArray(given) ? given : [given];
    for (const value of list) check(flag, value);
    if (list.every((value) => HARMLESS[flag]?.(value))) continue;
    flags.unused.push(
      `${list.map((value) => `--${flag}=${value}`).join(" ")}: accepted, not used by Galley (${NOT_USED[flag]})`,
    );
  }
  return flags;
}
