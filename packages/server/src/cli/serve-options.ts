import { parseArgs } from "node:util";
import type { ServerOptions } from "../server.js";

/** `galley serve` options, named and defaulted as tritonserver's flags (PROTOCOL.md §6). */
export interface ServeOptions {
  modelRepositories: string[];
  server: ServerOptions;
  logVerbose: number;
  logFormat: "default" | "ISO8601";
}

/** A command-line mistake: printed with the usage text, exit code 1. */
export class UsageError extends Error {
  override name = "UsageError";
}

export const SERVE_USAGE = `Usage: galley serve --model-repository <path> [options]

Options (named as tritonserver's; booleans take true/on/1 or false/off/0):
  --model-repository, --model-store <path>  model repository; repeatable (required)
  --id <name>                    server name in metadata (default: triton)
  --exit-timeout-secs <n>        seconds to drain in-flight requests at exit (default: 30)
  --allow-http <bool>            serve KServe v2 REST (default: true)
  --http-address <host>          (default: 0.0.0.0)
  --http-port <port>             (default: 8000; 0 picks a free port)
  --allow-grpc <bool>            serve gRPC, gRPC-Web and Connect (default: true)
  --grpc-address <host>          (default: 0.0.0.0)
  --grpc-port <port>             (default: 8001; 0 picks a free port)
  --log-verbose <level>          verbose logging level (default: 0)
  --log-format <default|ISO8601> (default: default)
  --help                         print this text
`;

/** Parse `galley serve` arguments; throws {@link UsageError} on any mistake. */
export function parseServeArgs(args: string[]): ServeOptions | "help" {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(args);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const v = parsed.values;
  if (v.help) return "help";
  const modelRepositories = [...(v["model-repository"] ?? []), ...(v["model-store"] ?? [])];
  if (modelRepositories.length === 0) throw new UsageError("--model-repository must be specified");
  const logFormat = v["log-format"] ?? "default";
  if (logFormat !== "default" && logFormat !== "ISO8601") {
    throw new UsageError(`invalid value for --log-format: '${logFormat}' (expected default or ISO8601)`);
  }
  const http = bool("--allow-http", v["allow-http"], true) && {
    host: v["http-address"] ?? "0.0.0.0",
    port: port("--http-port", v["http-port"], 8000),
  };
  const grpc = bool("--allow-grpc", v["allow-grpc"], true) && {
    host: v["grpc-address"] ?? "0.0.0.0",
    port: port("--grpc-port", v["grpc-port"], 8001),
  };
  return {
    modelRepositories,
    server: {
      id: v.id ?? "triton",
      http,
      grpc,
      exitTimeoutSecs: int("--exit-timeout-secs", v["exit-timeout-secs"], 30, 0),
    },
    logVerbose: int("--log-verbose", v["log-verbose"], 0, 0),
    logFormat,
  };
}

function parse(args: string[]) {
  return parseArgs({
    args,
    strict: true,
    allowPositionals: false,
    options: {
      "model-repository": { type: "string", multiple: true },
      "model-store": { type: "string", multiple: true },
      id: { type: "string" },
      "exit-timeout-secs": { type: "string" },
      "allow-http": { type: "string" },
      "http-address": { type: "string" },
      "http-port": { type: "string" },
      "allow-grpc": { type: "string" },
      "grpc-address": { type: "string" },
      "grpc-port": { type: "string" },
      "log-verbose": { type: "string" },
      "log-format": { type: "string" },
      help: { type: "boolean" },
    },
  });
}

function bool(flag: string, value: string | undefined, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  const v = value.toLowerCase();
  if (v === "true" || v === "on" || v === "1") return true;
  if (v === "false" || v === "off" || v === "0") return false;
  throw new UsageError(`invalid value for ${flag}: '${value}' (expected true/on/1 or false/off/0)`);
}

function int(flag: string, value: string | undefined, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER) {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!/^-?\d+$/.test(value) || n < min || n > max) {
    throw new UsageError(`invalid value for ${flag}: '${value}' (expected an integer in [${min}, ${max}])`);
  }
  return n;
}

function port(flag: string, value: string | undefined, fallback: number): number {
  return int(flag, value, fallback, 0, 65535);
}
