// Worker thread of scripted-model instances (one, or several on a shared thread; see
// `serveThread`): loads the model module, runs initialize / execute / finalize, and bridges
// response senders, cancellation and BLS calls to the main thread. A throw here fails requests;
// anything that kills the thread is the main side's concern.
import { AsyncLocalStorage } from "node:async_hooks";
import module from "node:module";
import { pathToFileURL } from "node:url";
import { getHeapStatistics } from "node:v8";
import { createAsyncQueue } from "../../base/async-queue.js";
import { collector } from "../../base/heap.js";
import type {
  BlsRequest,
  BlsResponse,
  InputTensor,
  Model,
  ModelContext,
  OutputTensor,
  Request,
  Response,
  ResponseSender,
  TraceContext,
} from "../../model/api.js";
import type { DirectRoute } from "../backend.js";
import { type Coalesced, coalescingPost, forEachMessage } from "../host/coalesce.js";
import { runAs, serveThread } from "../host/thread-slots.js";
import type { DirectCalls } from "./bls-direct.js";
import {
  type FromWorker,
  type JsInit,
  type ToWorker,
  transferList,
  type WireBlsResponse,
  type WireRequest,
  type WireResponse,
} from "./js-messages.js";
import { isDirectRef, toWireTensor, useErrorTable, wireError, wrapTensor } from "./js-tensors.js";

// `galley` turns on Node's compile cache and names its folder here (a thread does not inherit it):
// the model module, and tsx for TypeScript models, then compile once per Node version.
if (process.env.NODE_COMPILE_CACHE) {
  (module as { enableCompileCache?: (dir: string) => unknown }).enableCompileCache?.(process.env.NODE_COMPILE_CACHE);
}

/** The keys of the batch being executed, for BLS calls that name no signal. */
const batchKeys = new AsyncLocalStorage<number[]>();

type ModelModule = { default?: unknown };

async function importModel(file: string, slot: number | undefined): Promise<unknown> {
  // On a shared thread each instance imports its own copy of the module (its module-level state).
  const url = `${pathToFileURL(file).href}${slot === undefined ? "" : `?galley-slot=${slot}`}`;
  let loaded: ModelModule;
  if (/\.[cm]?ts$/.test(file)) {
    // TypeScript is transpiled on import by tsx's loader (relative imports included).
    const { tsImport } = await import("tsx/esm/api");
    loaded = (await tsImport(url, import.meta.url)) as ModelModule;
  } else {
    loaded = (await import(url)) as ModelModule;
  }
  // A CommonJS module's `module.exports.default` arrives one level down.
  let exported = loaded.default;
  if (exported && typeof exported === "object" && "default" in exported) {
    exported = (exported as ModelModule).default;
  }
  if (exported === undefined) throw new Error(`${file} has no default export (the model class)`);
  return exported;
}

function instantiate(exported: unknown): Model {
  const candidate: unknown =
    typeof exported === "function" ? new (exported as new () => unknown)() : (exported as unknown);
  if (!candidate || typeof (candidate as Model).execute !== "function") {
    throw new Error("the model's default export must be a class or an object with an execute(requests) method");
  }
  return candidate as Model;
}

serveThread((port, fail, slot) => {
  /**
   * Send to the server: what is sent in one run of callbacks and microtasks leaves together (a
   * buffer that cannot move, from Node's Buffer pool or memory the model keeps, is copied instead).
   * A message that cannot be posted at all ends the instance, so the host fails what it holds.
   */
  const post: (message: FromWorker, transfer?: Iterable<ArrayBuffer>) => void = coalescingPost<FromWorker>(
    (message, transfer) => port.postMessage(message, transfer),
    (error) => fail(error instanceof Error ? error : new Error(String(error))),
  );

  let model: Model | undefined;
  let decoupled = false;
  let modelOutputs: string[] = [];
  /** `memory_limit_mb` in bytes (0: none): V8's heap limit does not count ArrayBuffers, so this does. */
  let memoryLimit = 0;
  /** Requests not yet finished, by key: cancellation and late sends find them here. */
  // usualPath: the request has a priority or a trace that records tensors, so its BLS calls go
  // through the scheduler (where priority levels are kept and tensors captured), never a direct
  // route; traced: its calls are children of its trace (a direct one's stamped here).
  const open = new Map<
    number,
    { controller: AbortController; finished: boolean; usualPath: boolean; traced: boolean }
  >();
  /** The decoupled batches' turn: each runs when the one before it has returned from `execute`. */
  let executing: Promise<void> = Promise.resolve();

  const log = (level: "info" | "warn" | "error" | "verbose") => (message: string) =>
    post({ kind: "log", level, message: String(message) });

  // ---- BLS -----------------------------------------------------------------------------------

  interface Call {
    push(response: WireBlsResponse | undefined, error: Error | undefined, final: boolean, route?: DirectRoute): void;
  }
  const calls = new Map<number, Call>();
  let nextCall = 1;

  function blsMessage(request: BlsRequest, stream: boolean, direct = false) {
    const call = nextCall++;
    const parameters = { ...(request.parameters ?? {}) };
    if (request.priority !== undefined) parameters.priority = request.priority;
    if (request.timeoutMicroseconds !== undefined) parameters.timeout = request.timeoutMicroseconds;
    // Copied, not moved: the model usually still holds these tensors (its own inputs, say).
    const inputs = request.inputs.map((t) => {
      const wire = toWireTensor(t);
      return wire.device ? wire : { ...wire, data: new Uint8Array(wire.data) };
    });
    const preferred = request.preferredMemory;
    const message: FromWorker = {
      kind: "bls",
      call,
      stream,
      parents: batchKeys.getStore() ?? [],
      ownSignal: request.signal !== undefined,
      request: {
        model: request.model,
        version: request.version ?? "",
        id: request.id ?? "",
        inputs,
        outputs: [...(request.outputs ?? [])],
        parameters,
        ...(preferred ? { preferredMemory: { kind: preferred.kind, deviceId: preferred.deviceId ?? 0 } } : {}),
        ...(direct ? { direct: true } : {}),
      },
    };
    return { call, message, transfer: transferList(inputs) };
  }

  /**
   * Device tensors let go once the model no longer refers to their `device` object (copies of a
   * tensor made with spread share it); the server also lets them go when their batch's requests end.
   */
  const heldOnDevice = new FinalizationRegistry<number>((ref) => post({ kind: "bls-drop", refs: [ref] }));

  function blsResponse(wire: WireBlsResponse): BlsResponse {
    const outputs = wire.outputs.map((t) => {
      const tensor = wrapTensor(t);
      if (tensor.device) heldOnDevice.register(tensor.device, tensor.device.ref);
      return tensor;
    });
    return {
      modelName: wire.modelName,
      modelVersion: wire.modelVersion,
      id: wire.id,
      parameters: wire.parameters,
      outputs,
      output: (name) => outputs.find((o) => o.name === name),
    };
  }

  function blsError(error: { message: string; code?: string }): Error {
    return Object.assign(new Error(error.message), { code: error.code ?? "INTERNAL" });
  }

  /** A call through the main thread; `direct`: ask for a route for the next ones. */
  function usualInfer(request: BlsRequest, direct: boolean): Promise<BlsResponse> {
    // Tensors a direct call kept here are this worker's: the main thread gets their bytes.
    if (request.inputs.some((t) => t.device && isDirectRef(t.device.ref))) {
      return withHostInputs(request).then((onHost) => usualInfer(onHost, direct));
    }
    const { call, message, transfer } = blsMessage(request, false, direct);
    return new Promise<BlsResponse>((resolve, reject) => {
      const onAbort = () => post({ kind: "bls-cancel", call });
      request.signal?.addEventListener("abort", onAbort, { once: true });
      calls.set(call, {
        push(response, error, _final, route) {
          calls.delete(call);
          request.signal?.removeEventListener("abort", onAbort);
          if (error || !response) reject(error ?? new Error("BLS call ended without a response"));
          else if (!route) resolve(blsResponse(response));
          else
            void learnRoute(request, route).then(
              () => resolve(blsResponse(response)),
              () => resolve(blsResponse(response)),
            );
        },
      });
      post(message, transfer);
      // A signal aborted already fires no event: the call is cancelled as it starts.
      if (request.signal?.aborted) onAbort();
    });
  }

  // ---- direct BLS calls (BlsRequest.direct, see bls-direct.ts) --------------------------------

  /** `request` with the device tensors direct calls kept here copied to host bytes (one copy each). */
  async function withHostInputs(request: BlsRequest): Promise<BlsRequest> {
    const inputs = await Promise.all(
      request.inputs.map(async (t): Promise<OutputTensor> => {
        if (!t.device || !isDirectRef(t.device.ref)) return t;
        // Made by a direct call, so `direct` exists: its errors are the usual path's (code and message).
        const data = await (direct as DirectCalls).hostBytes({ ...t, device: t.device });
        return { name: t.name, datatype: t.datatype, shape: t.shape, data };
      }),
    );
    return { ...request, inputs };
  }

  /** Made at the first route; null once it turned out it cannot be. */
  let direct: DirectCalls | null | undefined;

  async function learnRoute(request: BlsRequest, route: DirectRoute): Promise<void> {
    if (direct === undefined) {
      try {
        const { DirectCalls } = await import("./bls-direct.js");
        direct ??= new DirectCalls({
          record: (record) => post({ kind: "bls-direct", record }),
          renew: (model, version) => post({ kind: "bls-route", model, version }),
          log: {
            info: log("info"),
            warn: log("warn"),
            verbose: () => {},
          },
        });
      } catch (error) {
        direct = null;
        log("warn")(`direct BLS calls are not available in this thread: ${(error as Error).message}`);
      }
    }
    direct?.learn(request, route);
  }

  /** Whether the call asks for nothing a direct call skips. */
  function directable(request: BlsRequest, parents: readonly number[]): boolean {
    return (
      request.direct === true &&
      direct !== null &&
      request.priority === undefined &&
      request.timeoutMicroseconds === undefined &&
      !parents.some((key) => open.get(key)?.usualPath)
    );
  }

  async function directInfer(request: BlsRequest, parents: readonly number[]): Promise<BlsResponse> {
    // Cancelled as the main thread's calls are: by its own signal, else once every request of the
    // batch that made it (still open) is.
    const cancelled = () =>
      request.signal
        ? request.signal.aborted
        : parents.length > 0 && parents.every((key) => open.get(key)?.controller.signal.aborted === true);
    // Traced as a child of the batch's first traced request, as the usual path's calls are.
    const traceParent = parents.find((key) => open.get(key)?.traced);
    const answer = await direct?.infer(request, cancelled, parents, traceParent);
    return answer ?? usualInfer(request, true);
  }

  const context: ModelContext = {
    infer(request) {
      const parents = batchKeys.getStore() ?? [];
      if (directable(request, parents)) return directInfer(request, parents);
      return usualInfer(request, false);
    },

    stream(request) {
      return {
        [Symbol.asyncIterator]() {
          const { call, message, transfer } = blsMessage(request, true);
          const ready = createAsyncQueue<{ response?: WireBlsResponse; error?: Error; final: boolean }>();
          const reader = ready[Symbol.asyncIterator]();
          let ended = false;
          const onAbort = () => post({ kind: "bls-cancel", call });
          request.signal?.addEventListener("abort", onAbort, { once: true });
          calls.set(call, {
            push(response, error, final) {
              ready.push({ ...(response ? { response } : {}), ...(error ? { error } : {}), final });
              if (final || error) calls.delete(call);
            },
          });
          post(message, transfer);
          if (request.signal?.aborted) onAbort();
          const finish = () => {
            ended = true;
            request.signal?.removeEventListener("abort", onAbort);
          };
          return {
            async next(): Promise<IteratorResult<BlsResponse>> {
              while (!ended) {
                const next = await reader.next();
                if (next.done) break;
                const item = next.value;
                if (item.error) {
                  finish();
                  throw item.error;
                }
                if (item.final) finish();
                if (item.response) return { value: blsResponse(item.response), done: false };
              }
              return { value: undefined, done: true };
            },
            async return(): Promise<IteratorResult<BlsResponse>> {
              if (!ended) {
                finish();
                calls.delete(call);
                post({ kind: "bls-cancel", call });
              }
              return { value: undefined, done: true };
            },
          };
        },
      };
    },

    log: { info: log("info"), warn: log("warn"), error: log("error"), verbose: log("verbose") },
  };

  // ---- requests and responses ----------------------------------------------------------------

  function wireResponse(response: Response | undefined, requested: readonly string[]): WireResponse {
    if (typeof response !== "object" || response === null || Array.isArray(response)) {
      const type = response === null ? "null" : Array.isArray(response) ? "array" : typeof response;
      return { outputs: [], parameters: {}, notAResponse: type };
    }
    if (response.error !== undefined) return { outputs: [], parameters: {}, error: wireError(response.error) };
    // Config outputs nobody asked for are dropped; names the config lacks go on, for the server to refuse.
    const dropped = new Set(modelOutputs.filter((name) => !requested.includes(name)));
    try {
      const outputs = (response.outputs ?? []).filter((o) => !dropped.has(o.name)).map(toWireTensor);
      return { outputs, parameters: { ...(response.parameters ?? {}) } };
    } catch (error) {
      return { outputs: [], parameters: {}, error: wireError(error) };
    }
  }

  /** The request `key` has ended: its state goes, and the device tensors only it held. */
  function ended(key: number): void {
    open.delete(key);
    direct?.requestEnded(key);
  }

  function makeRequest(wire: WireRequest): Request {
    const inputs: InputTensor[] = wire.inputs.map(wrapTensor);
    const controller = new AbortController();
    const priority = Number(wire.parameters.priority ?? 0);
    const state = {
      controller,
      finished: false,
      usualPath: wire.traceTensors === true || priority >= 1,
      traced: wire.traced === true,
    };
    open.set(wire.key, state);
    if (wire.cancelled) controller.abort();
    const requested = wire.outputs.length > 0 ? wire.outputs : modelOutputs;
    const sender: ResponseSender = {
      send(response?: Response, options?: { final?: boolean }) {
        if (state.finished) throw new Error("the request already received its final response");
        const final = options?.final ?? false;
        if (final) {
          state.finished = true;
          ended(wire.key);
        }
        if (!response && !final) return;
        const wire2 = response ? wireResponse(response, requested) : undefined;
        post(
          { kind: "response", key: wire.key, ...(wire2 ? { response: wire2 } : {}), final },
          wire2 ? transferList(wire2.outputs) : new Set(),
        );
      },
      isCancelled: () => controller.signal.aborted,
    };
    const traceContext = wire.traceContext === undefined ? undefined : (JSON.parse(wire.traceContext) as TraceContext);
    return {
      id: wire.id,
      ...(traceContext ? { traceContext } : {}),
      modelName: wire.modelName,
      modelVersion: wire.modelVersion,
      correlationId: wire.correlationId,
      flags: wire.flags,
      parameters: wire.parameters,
      inputs,
      requestedOutputNames: requested,
      input: (name) => inputs.find((t) => t.name === name),
      signal: controller.signal,
      isCancelled: () => controller.signal.aborted,
      responseSender: () => sender,
    };
  }

  async function execute(batch: number, wires: WireRequest[], made?: Request[]): Promise<void> {
    const current = model;
    if (!current) {
      post({ kind: "executed", batch, result: { error: { message: "the model is not initialized" } } });
      return;
    }
    const requests = made ?? wires.map(makeRequest);
    try {
      const result = await batchKeys.run(
        wires.map((w) => w.key),
        () => current.execute(requests, context),
      );
      if (overMemoryLimit()) return;
      if (decoupled) {
        post({ kind: "executed", batch, result: {} });
        return;
      }
      for (const wire of wires) ended(wire.key);
      if (!Array.isArray(result) || result.length !== requests.length) {
        const got = Array.isArray(result) ? `${result.length} responses` : String(result);
        throw new Error(`execute must return one response per request: expected ${requests.length}, got ${got}`);
      }
      const responses = result.map((r: Response, i) => wireResponse(r, requests[i]?.requestedOutputNames ?? []));
      const transfer = new Set<ArrayBuffer>();
      for (const r of responses) transferList(r.outputs, transfer);
      post({ kind: "executed", batch, result: { responses } }, transfer);
    } catch (error) {
      for (const wire of wires) {
        if (!decoupled) ended(wire.key);
      }
      if (overMemoryLimit()) return;
      post({ kind: "executed", batch, result: { error: wireError(error) } });
    }
  }

  /**
   * Whether the heap and external memory (ArrayBuffers, Buffers) together exceed `memory_limit_mb`;
   * if so the server is told, and it stops this worker. Garbage counts until collected, so the
   * answer is given after a collection.
   */
  function overMemoryLimit(): boolean {
    if (memoryLimit <= 0) return false;
    const used = () => {
      const heap = getHeapStatistics();
      return heap.used_heap_size + heap.external_memory;
    };
    if (used() <= memoryLimit) return false;
    const collectGarbage = collector();
    // Twice: an ArrayBuffer's memory is released by the collection after the one that finds it dead.
    collectGarbage();
    collectGarbage();
    const after = used();
    if (after <= memoryLimit) return false;
    post({ kind: "memory-exceeded", usedBytes: after });
    return true;
  }

  async function initialize(message: JsInit): Promise<void> {
    try {
      useErrorTable(message.errors);
      decoupled = message.decoupled;
      modelOutputs = message.outputs;
      memoryLimit = message.memoryLimitBytes ?? 0;
      // Memory held between executes (a decoupled model sending in the background, a timer) counts too.
      if (memoryLimit > 0) setInterval(overMemoryLimit, 250).unref();
      const created = instantiate(await importModel(message.file, slot));
      await created.initialize?.(message.args as never, context);
      model = created;
      post({ kind: "started", info: undefined });
    } catch (error) {
      post({ kind: "start-failed", message: (error as Error)?.message ?? String(error) });
    }
  }

  // A message that cannot be read (a detached buffer, say) would otherwise vanish and leave its
  // call waiting forever: end the instance instead, so it restarts and fails what it holds.
  port.on("messageerror", (error) => fail(new Error(`a message from the server could not be read: ${error.message}`)));

  // What a message makes the model do synchronously is marked as this instance's (see runAs).
  port.on("message", (message: ToWorker | Coalesced<ToWorker>) => runAs(slot, () => forEachMessage(message, receive)));

  function receive(message: ToWorker): void {
    switch (message.kind) {
      case "start":
        void initialize(message.init);
        return;
      case "execute": {
        if (!decoupled) {
          void execute(message.batch, message.payload);
          return;
        }
        // A decoupled instance takes several batches at once (`depth`): they run one after another,
        // and their requests are open from now, so a cancel that comes while they wait is kept.
        const { batch, payload } = message;
        const made = payload.map(makeRequest);
        executing = executing.then(() => execute(batch, payload, made));
        return;
      }
      case "cancel":
        open.get(message.key)?.controller.abort();
        return;
      case "bls-route":
        if (message.route) direct?.learn(message, message.route);
        else direct?.forget(message);
        return;
      case "bls-reply": {
        const error = message.error ? blsError(message.error) : undefined;
        calls.get(message.call)?.push(message.response, error, message.final, message.route);
        return;
      }
      case "is-ready":
        void Promise.resolve()
          .then(() => model?.isReady?.() ?? model !== undefined)
          .then(
            (ready) => post({ kind: "ready", probe: message.probe, ready: Boolean(ready) }),
            () => post({ kind: "ready", probe: message.probe, ready: false }),
          );
        return;
      case "auto-complete":
        void importModel(message.file, slot)
          .then((exported) => {
            const hook = (exported as { autoCompleteConfig?: (c: unknown) => unknown }).autoCompleteConfig;
            const config = hook ? hook.call(exported, structuredClone(message.config)) : message.config;
            return Promise.resolve(config);
          })
          .then(
            (config) => post({ kind: "auto-completed", config: config as Record<string, unknown> }),
            (error: unknown) => post({ kind: "auto-completed", error: (error as Error)?.message ?? String(error) }),
          );
        return;
      case "stop":
        void Promise.resolve()
          .then(() => model?.finalize?.())
          .catch((error: unknown) => log("error")(`finalize failed: ${(error as Error)?.message ?? String(error)}`))
          .finally(() => post({ kind: "stopped" }));
        return;
    }
  }

  // Let go (a shared thread detached this instance): requests still open are cancelled and BLS
  // calls still waiting fail, so the model's code stops waiting on a server that has forgotten it.
  return () => {
    const gone = new Error("the instance was stopped");
    for (const request of open.values()) request.controller.abort();
    open.clear();
    for (const call of [...calls.values()]) call.push(undefined, gone, true);
    calls.clear();
    model = undefined;
  };
});
