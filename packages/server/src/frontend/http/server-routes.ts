import { InferenceError } from "../../base/errors.js";
import type { LogSettingValue } from "../../core/log-settings.js";
import { CUDA_IPC_HANDLE_BYTES } from "../../core/shared-memory.js";
import type { TraceUpdate } from "../../core/trace-settings.js";
import { setTraceNumber, traceLevel, traceNumber } from "../../core/trace-update.js";
import type { HttpAnswer } from "../transport/http-exchange.js";
import { type Context, empty, json, requiredJsonBody } from "./context.js";
import { asArray, asBool, asString, asUint, internal, member, required } from "./json-access.js";
import type { JsonValue } from "./json-parse.js";

/** `GET /v2/health/live|ready`: 200 or 400, empty body, no content type. */
export function handleHealth(ctx: Context, which: "live" | "ready"): HttpAnswer {
  const ok = which === "live" ? ctx.server.isLive() : ctx.server.isReady();
  return empty(ok ? 200 : 400, false);
}

/** `GET /v2`: name, version, extensions. */
export function handleServerMetadata(ctx: Context): HttpAnswer {
  return json(200, ctx.server.metadata());
}

/**
 * `GET|POST /v2/logging` (PROTOCOL.md §1.2). A POST applies the settings it names in Triton's
 * order, each as it is read (an error leaves the earlier ones applied); `null` leaves a setting
 * as it is and unknown keys are ignored. Wrong JSON types are INTERNAL (500), as in Triton.
 */
export async function handleLogging(ctx: Context): Promise<HttpAnswer> {
  let settings = ctx.server.logSettings();
  if (ctx.request.method === "POST") {
    const json = await requiredJsonBody(ctx);
    const read: [string, (value: NonNullable<ReturnType<typeof member>>) => LogSettingValue][] = [
      ["log_file", () => "unsupported"],
      ["log_info", asBool],
      ["log_warning", asBool],
      ["log_error", asBool],
      ["log_verbose_level", (v) => Number(asUint(v))],
      ["log_format", asString],
    ];
    for (const [key, parse] of read) {
      const value = member(json, key);
      if (value === undefined || value === null) continue;
      if (key === "log_file") throw new InferenceError("LOG_FILE_UNSUPPORTED");
      settings = ctx.server.logSettings({ [key]: internal("", () => parse(value)) });
    }
  }
  const s = settings;
  return json(200, {
    log_file: s.log_file,
    log_info: s.log_info,
    log_warning: s.log_warning,
    log_error: s.log_error,
    log_verbose_level: s.log_verbose_level,
    log_format: s.log_format,
  });
}

/**
 * `GET|POST /v2[/models/{m}]/trace/setting` (the trace extension), in Triton's order: the model
 * must be ready (400 `Request for unknown model : m`), then a POST's body is read field by field —
 * `trace_file` present at all is 501, `trace_level` a list of strings, the numbers strings, `null`
 * clears a field, unknown keys are ignored — and applied. The reply is the settings in force.
 */
export async function handleTrace(ctx: Context, model = ""): Promise<HttpAnswer> {
  let report = ctx.server.traceSettings(model);
  if (ctx.request.method === "POST") {
    const json = await requiredJsonBody(ctx);
    const change = traceChange(json);
    report = ctx.server.traceSettings(model, () => change);
  }
  return json(200, report);
}

function traceChange(json: JsonValue): TraceUpdate {
  if (member(json, "trace_file") !== undefined) throw new InferenceError("TRACE_FILE_UNSUPPORTED");
  const change: TraceUpdate = {};
  const level = member(json, "trace_level");
  if (level === null) change.level = null;
  else if (level !== undefined) {
    const known = traceLevel(internal("", () => asArray(level).map(asString)));
    if (known !== undefined) change.level = known;
  }
  for (const name of ["trace_rate", "trace_count", "log_frequency"] as const) {
    const value = member(json, name);
    if (value === undefined) continue;
    setTraceNumber(
      change,
      name,
      value === null
        ? null
        : traceNumber(
            name,
            internal("", () => asString(value)),
            "http",
          ),
    );
  }
  return change;
}

/**
 * System and CUDA shared memory (`--allow-client-shm`, off by default as in Triton). Where no GPU
 * is found the CUDA endpoints answer as a tritonserver without GPUs: no CUDA regions; registering
 * one is refused; CUDA unregister succeeds.
 */
export async function handleSharedMemory(
  ctx: Context,
  memory: "system" | "cuda",
  region: string,
  action: "status" | "register" | "unregister",
): Promise<HttpAnswer> {
  if (memory === "cuda") return handleCudaSharedMemory(ctx, region, action);
  const shm = ctx.server.sharedMemory;
  switch (action) {
    case "status":
      return json(
        200,
        shm.status(region).map((r) => ({ name: r.name, key: r.key, offset: r.offset, byte_size: r.byteSize })),
      );
    case "register": {
      if (region === "") throw new InferenceError("SHM_REGION_NAME_REQUIRED", { kind: memory });
      if (!shm.allowed) throw new InferenceError("SHM_DISABLED");
      const json = await requiredJsonBody(ctx);
      const key = internal("Unable to parse 'key'", () => asString(member(json, "key")));
      const offsetJson = member(json, "offset");
      const offset = offsetJson === undefined ? 0n : internal("Unable to parse 'offset'", () => asUint(offsetJson));
      const byteSize = internal("Unable to parse 'byte_size'", () => asUint(member(json, "byte_size")));
      await shm.register(region, key, Number(offset), Number(byteSize));
      return empty(200);
    }
    case "unregister":
      await shm.unregister(region);
      return empty(200);
  }
}

/**
 * `/v2/cudasharedmemory/...` (PROTOCOL.md §1.2), in the order of Triton's `HandleCudaSharedMemory`:
 * the region name, then the body's `raw_handle.b64`, `byte_size` and `device_id` (accessor
 * failures are INTERNAL, unprefixed), then the handle's decoded size, then the registration.
 */
async function handleCudaSharedMemory(
  ctx: Context,
  region: string,
  action: "status" | "register" | "unregister",
): Promise<HttpAnswer> {
  const shm = ctx.server.sharedMemory;
  switch (action) {
    case "status":
      return json(
        200,
        shm.cudaStatus(region).map((r) => ({ name: r.name, device_id: r.deviceId, byte_size: r.byteSize })),
      );
    case "register": {
      if (region === "") throw new InferenceError("SHM_REGION_NAME_REQUIRED", { kind: "cuda" });
      if (!(await shm.cudaAvailable())) throw new InferenceError("CUDA_SHM_NOT_SUPPORTED", { name: region });
      if (!shm.allowed) throw new InferenceError("SHM_DISABLED");
      const json = await requiredJsonBody(ctx);
      const rawHandle = member(json, "raw_handle");
      if (rawHandle === undefined) throw new InferenceError("CUDA_SHM_NO_RAW_HANDLE");
      const b64 = internal("", () => asString(required(rawHandle, "b64")));
      const byteSize = internal("", () => asUint(required(json, "byte_size")));
      const deviceId = internal("", () => asUint(required(json, "device_id")));
      // Lenient, as Triton's decoder: characters outside the alphabet are skipped.
      const handle = new Uint8Array(Buffer.from(b64, "base64"));
      if (handle.byteLength !== CUDA_IPC_HANDLE_BYTES) throw new InferenceError("CUDA_SHM_BAD_HANDLE");
      await shm.registerCuda(region, handle, deviceId, byteSize);
      return empty(200);
    }
    case "unregister":
      await shm.unregister(region, "cuda");
      return empty(200);
  }
}
