import { randomBytes } from "node:crypto";
import type { ModelRateLimiter } from "@galley/proto";
import { now } from "../../base/clock.js";
import { InferenceError, modelError, toInferenceError } from "../../base/errors.js";
import { type InferenceRequest, priorityOf } from "../../base/inference-request.js";
import type { Logger } from "../../base/log.js";
import { type DeviceTensor, hostTensor, NO_BYTES, type Parameters, type Tensor } from "../../base/tensor.js";
import type { BackendInstance, ExecuteResult } from "../backend.js";
import { checkOutputs, type OutputRules } from "../batch-io.js";
import { createInstanceHost, type InstanceHost } from "../host/instance-host.js";
import type { SharedProcess } from "../host/process-transport.js";
import { BlsCalls, type InferencePath } from "../scripted/bls-calls.js";
import type { BlsReply, WireBlsRequest } from "../scripted/bls-wire.js";
import type { CustomMetrics } from "./custom-metrics.js";
import { type CudaIpcApi, DeviceIpc } from "./device-ipc.js";
import type {
  FromStub,
  IpcTensor,
  ModelControlOp,
  PyError,
  PyInit,
  PyProtocol,
  PyRequest,
  PyResponse,
  PyResult,
  ShmTensor,
  ToStub,
} from "./python-messages.js";
import type { SegmentMapper } from "./shm-mapping.js";
import { SHM_PREFIX, ShmPool } from "./shm-pool.js";

/** How one instance runs: its stub process, `initialize`'s args and the limits. */
export interface PythonInstanceOptions {
  name: string;
  /**
   * The stub process it runs in (the interpreter, the stub, the environment that finds pb_utils),
   * on socket `channel`: a process of its own, or one its model's instances share.
   */
  process: SharedProcess<ToStub, FromStub>;
  channel: number;
  init: Omit<PyInit, "shm">;
  /** What the model's outputs must look like (its config). */
  outputRules: OutputRules;
  /**
   * The model may reschedule requests (`sequence_batching { iterative_sequence: true }`): those it
   * releases with RESCHEDULE are reported in `ExecuteResult.rescheduled`. Otherwise they fail with
   * Triton's RESCHEDULE_UNSUPPORTED.
   */
  reschedules?: boolean;
  mapper: SegmentMapper;
  metrics: CustomMetrics;
  /** `execute_timeout_ms`: an execute that takes longer restarts the instance; 0 or absent: none. */
  executeTimeoutMs?: number;
  /** `initialize_timeout_ms`: a start whose `initialize` takes longer fails; 0 or absent: none. */
  initializeTimeoutMs?: number;
  /** Aborting it while the instance starts stops the process and fails the start. */
  signal?: AbortSignal;
  rateLimiter?: ModelRateLimiter;
  inference: () => InferencePath;
  log: Logger;
  /** The CUDA IPC functions (tests pass their own); `@galley/backends-native`'s by default. */
  cudaIpc?: () => Promise<CudaIpcApi>;
}

/** A non-decoupled request's answer sent after execute returned (see `PyResult.deferred`). */
/** A request's answer: its outputs, or why it failed. */
type Outcome = Tensor[] | Error;

/** Let go of the GPU tensors of outputs that go nowhere. */
function release(outcome: Outcome | undefined): void {
  if (outcome && !(outcome instanceof Error)) for (const o of outcome) o.device?.release();
}

interface LateAnswer {
  outcome?: Tensor[] | Error;
  parameters?: Parameters;
  /** Wakes the batch waiting for it. */
  settle?: () => void;
}

/** The segment fields of a tensor with no bytes here (a held device tensor). */
const NO_SHM = { s: -1, z: 0, o: 0, n: 0 } as const;

/** How long the stub's read blocks wait to be given back when no batch carries them. */
const RELEASE_DELAY_MS = 2;

/** How long a readiness check waits for the model's `is_ready()` (Triton's `kUserModelReadinessTimeoutMs`). */
const READINESS_TIMEOUT_MS = 5000;

/**
 * The CUDA IPC bookkeeping of the instances of each stub process: memory one of them mapped is
 * that process's own for all of them (a handle does not open in the process that made it).
 */
const STUB_PEERS = new WeakMap<object, Set<DeviceIpc>>();

/** Parameters Triton keeps out of a Python request's `parameters()`. */
const RESERVED_PARAMETERS = new Set(["sequence_id", "sequence_start", "sequence_end", "priority", "timeout"]);

/**
 * One instance of a Python model: a stub process (`galley_python_stub.py`) running the model
 * (or a thread of one its model's instances share: `SHARED_STUB_PROCESS`), supervised by an
 * instance host. Tensors cross through the instance's shared memory (see `ShmPool`). Whatever ends
 * the process (a crash, a kill, `os._exit`, an execute past its timeout) fails only the requests
 * its instances hold; the host restarts it, backing off after repeated failures, and while it
 * waits the instance is not {@link PythonInstance.healthy}.
 */
export class PythonInstance implements BackendInstance {
  readonly name: string;
  readonly rateLimiter?: ModelRateLimiter;
  readonly #options: PythonInstanceOptions;
  readonly #host: InstanceHost<PyProtocol>;
  readonly #bls: BlsCalls;
  readonly #prefix: string;
  #pool: ShmPool | undefined;
  /** The stub's blocks read and not yet given back. */
  #release: [number, number][] = [];
  #releaseScheduled = false;
  /** Batches sent and not yet answered here (their answer is read a microtask after it arrives). */
  #executing = 0;
  /**
   * Our blocks the stub released while a batch was executing: applied once its answer is read,
   * since the release of an input that an output views follows that answer in the same write.
   */
  #releasedMeanwhile: [number, number][] = [];
  /** Device tensors the model dropped while a batch was executing: let go once its answer is read. */
  #droppedMeanwhile: number[] = [];
  /** GPU loans the stub gave back while a batch was executing: ended once its answer is read. */
  #ipcDropsMeanwhile: number[] = [];
  /** Non-decoupled answers whose final flag came (or will come) after execute returned, by key. */
  readonly #late = new Map<number, LateAnswer>();
  /** The model's `is_ready()` in flight: checks that come meanwhile wait for it, as Triton's do. */
  #readiness: Promise<true | string> | undefined;
  readonly #probes = new Map<number, (answer: true | string) => void>();
  #nextProbe = 1;
  /**
   * A rescheduled request's stand-in between two executions (`InferenceRequest.iteration` →
   * a negative number no key takes): the BLS device tensors it holds wait there for its next
   * execution, and go when the request is collected without one.
   */
  readonly #carried = new WeakMap<object, number>();
  readonly #carriers = new FinalizationRegistry<number>((carrier) => this.#bls.ended(carrier));
  #nextCarrier = -1;
  /** GPU tensors lent to and borrowed from the stub through CUDA IPC (one per stub process). */
  #ipc: DeviceIpc;
  /** Decoupled responses still being mapped, by request key: the next waits for the last. */
  /** BLS replies waiting for their GPU outputs' loans, by call (each posts after the one before). */
  readonly #replying = new Map<number, Promise<void>>();
  readonly #responding = new Map<number, Promise<void>>();

  private constructor(options: PythonInstanceOptions) {
    this.name = options.name;
    if (options.rateLimiter) this.rateLimiter = options.rateLimiter;
    this.#options = options;
    this.#ipc = this.#newIpc();
    this.#prefix = `${SHM_PREFIX}${process.pid}_${randomBytes(6).toString("hex")}_`;
    this.#host = createInstanceHost<PyProtocol>({
      name: options.name,
      model: options.init.args.model_name ?? options.name,
      transport: options.process.transport(options.channel, () => this.#host.revive()),
      init: { ...options.init, shm: this.#prefix },
      ...(options.initializeTimeoutMs ? { startTimeoutMs: options.initializeTimeoutMs } : {}),
      ...(options.executeTimeoutMs ? { executeTimeoutMs: options.executeTimeoutMs } : {}),
      // As Triton's Python backend: a stub that died leaves its model not ready; the next request
      // fails with Triton's words and starts a new stub.
      restartOnRequest: (name) =>
        new InferenceError("BACKEND_FAILED", {
          message: `Failed to process the request(s) for model instance '${name}', message: Stub process '${name}' is not healthy.`,
        }),
      log: options.log,
      onMessage: (message) => this.#onMessage(message),
      onEnded: (key) => this.#bls.ended(key),
      onDown: () => {
        this.#bls.cancelAll();
        for (const answer of this.#probes.values())
          answer("Stub process is not healthy while waiting for user-defined is_ready() response");
        this.#probes.clear();
        // The stub is gone: its segments and ours start over with the next one.
        this.#pool?.close();
        this.#pool = undefined;
        this.#release = [];
        this.#releasedMeanwhile = [];
        this.#droppedMeanwhile = [];
        this.#ipcDropsMeanwhile = [];
        this.#options.metrics.dropOwner(this.#prefix);
        // Everything it borrowed comes back; everything it lent is gone with it.
        this.#ipc.close();
        this.#ipc = this.#newIpc();
      },
    });
    this.#bls = new BlsCalls({
      inference: options.inference,
      reply: (message) => this.#blsReply(message),
      signalOf: (key) => this.#host.request(key)?.signal,
      priorityOf: (key) => this.#host.request(key)?.priority,
      isOpen: (key) => this.#host.request(key) !== undefined,
      traceOf: (key) => this.#host.request(key)?.trace,
      tracing: "explicit",
    });
  }

  /**
   * A BLS reply to the stub. GPU outputs go as references the server holds, each with a loan of its
   * memory where one costs no copy (a libtorch output by its allocation's handle), so that the
   * model's `torch.from_dlpack` maps it without asking; replies of one call keep their order.
   */
  #blsReply(message: BlsReply): void {
    const outputs = message.response?.outputs ?? [];
    const lend = this.#host.info?.cuda === true && outputs.some((t) => t.device);
    const before = this.#replying.get(message.call);
    if (!lend && !before) {
      this.#postBlsReply(message, []);
      return;
    }
    const loans = lend ? Promise.all(outputs.map((t) => t.device && this.#share(t.device.ref))) : [];
    const ipc = this.#ipc; // a new one when the stub restarts: a reply to the old stub is dropped
    const posted = (before ?? Promise.resolve()).then(async () => {
      const lent = await loans;
      if (this.#ipc === ipc) this.#postBlsReply(message, lent);
    });
    this.#replying.set(message.call, posted);
    void posted.finally(() => {
      if (this.#replying.get(message.call) === posted) this.#replying.delete(message.call);
    });
  }

  /** A loan of the held BLS output `ref` by a handle of its own, if it can have one without a copy. */
  async #share(ref: number): Promise<IpcTensor | undefined> {
    const own = this.#bls.retained(ref);
    if (!own) return undefined;
    const shared = await this.#ipc.share(own).catch(() => undefined);
    if (!shared) own.release();
    return shared;
  }

  #postBlsReply(message: BlsReply, loans: readonly (IpcTensor | undefined)[]): void {
    const pool = this.#shm();
    const response: PyResponse | undefined = message.response && {
      outputs: message.response.outputs.map((t, i) => {
        if (!t.device) return pool.put(t);
        const ipc = loans[i];
        return {
          name: t.name,
          datatype: t.datatype,
          shape: t.shape,
          ...NO_SHM,
          device: t.device,
          ...(ipc ? { ipc } : {}),
        };
      }),
      parameters: message.response.parameters,
    };
    this.#host.post({
      kind: "bls-reply",
      call: message.call,
      ...(response ? { response } : {}),
      ...(message.error
        ? {
            error: {
              message: message.error.message,
              code: message.error.code,
              ...(message.error.refused ? { refused: true } : {}),
            },
          }
        : {}),
      final: message.final,
    });
  }

  /** Start the process and run `initialize`; rejects with the model's error (Triton's words). */
  static async start(options: PythonInstanceOptions): Promise<PythonInstance> {
    const instance = new PythonInstance(options);
    try {
      await instance.#host.start(options.signal);
    } catch (error) {
      instance.#pool?.close();
      throw error;
    }
    return instance;
  }

  get restarts(): number {
    return this.#host.restarts;
  }

  get healthy(): boolean {
    return this.#host.health === "up";
  }

  #newIpc(): DeviceIpc {
    const model = this.#options.init.args.model_name ?? this.#options.name;
    let peers = STUB_PEERS.get(this.#options.process);
    if (!peers) {
      peers = new Set();
      STUB_PEERS.set(this.#options.process, peers);
    }
    return new DeviceIpc(model, this.#options.cudaIpc, peers);
  }

  /** Whether inputs on a GPU reach the model there (`FORCE_CPU_ONLY_INPUT_TENSORS` "no" and a stub with CUDA). */
  get #deviceInputs(): boolean {
    return this.#options.init.forceCpuOnlyInputs === false && this.#host.info?.cuda === true;
  }

  /** GPU tensors the stub's CUDA IPC loans stand for in its inputs, else host copies (counted). */
  async #placeInputs(requests: readonly InferenceRequest[]): Promise<(Tensor | ShmTensor)[][]> {
    return Promise.all(
      requests.map((request) =>
        Promise.all(
          request.inputs.map(async (t): Promise<Tensor | ShmTensor> => {
            const device = t.device;
            if (!device) return t;
            if (this.#deviceInputs) {
              const ipc = await this.#ipc.lend(device);
              return { name: t.name, datatype: t.datatype, shape: t.shape, ...NO_SHM, ipc };
            }
            return hostTensor(t);
          }),
        ),
      ),
    );
  }

  /**
   * `torch.from_dlpack` of a held BLS output: lend it to the stub, by a handle of its own where it
   * can have one (the stub may keep the tensor after it drops the BLS output), else by one copy.
   */
  async #deviceExport(call: number, ref: number): Promise<void> {
    const own = this.#bls.retained(ref);
    const held = this.#bls.heldDevice(ref);
    try {
      if (!held) throw new Error("the device tensor is no longer held");
      // Without a handle of its own, the memory is the holder's: the stub gets a copy.
      const tensor = own
        ? await this.#ipc.lend(own)
        : await this.#ipc.lend(Object.assign(Object.create(held) as DeviceTensor, { pointer: undefined }), () => {});
      this.#host.post({ kind: "device-exported", call, tensor });
    } catch (error) {
      own?.release();
      this.#host.post({ kind: "device-exported", call, error: (error as Error).message });
    }
  }

  /** A BLS call whose inputs include the stub's GPU memory: held here by reference for the call. */
  async #blsWithIpc(message: Extract<PyProtocol["fromInstance"], { kind: "bls" }>): Promise<void> {
    let wire: WireBlsRequest;
    try {
      const inputs = await Promise.all(
        message.request.inputs.map(async (t) => {
          if (t.device) return { name: t.name, datatype: t.datatype, shape: t.shape, data: NO_BYTES, device: t.device };
          if (t.ipc) {
            const { device, ...tensor } = await this.#mapped(t, t.ipc);
            return this.#bls.hold(tensor, device as DeviceTensor, message.parents);
          }
          const { name, datatype, shape, data } = this.#take([t])[0] as Tensor;
          return { name, datatype, shape, data };
        }),
      );
      wire = { ...message.request, inputs };
    } catch (error) {
      this.#host.post({
        kind: "bls-reply",
        call: message.call,
        error: { message: (error as Error).message, code: "INTERNAL" },
        final: true,
      });
      return;
    }
    await this.#bls.run(message.call, wire, message.stream, message.parents);
  }

  /**
   * Triton's readiness check of the instance: the stub is up, and the model's `is_ready()`, where
   * it has one, answered true within 5 s. One call at a time reaches the model: a check that comes
   * while one is in flight waits (5 s at most) for its answer. A string: not ready, and why.
   */
  isReady(): Promise<true | string> {
    if (this.#host.health !== "up") return Promise.resolve(`Stub process '${this.name}' is not healthy.`);
    if (!this.#host.info?.isReady) return Promise.resolve(true);
    let waited = "Timed out waiting for in-flight is_ready() response";
    if (!this.#readiness) {
      waited = "Timed out waiting for user-defined is_ready() response";
      const probe = this.#nextProbe++;
      const asked = new Promise<true | string>((resolve) => {
        this.#probes.set(probe, resolve);
        this.#host.post({ kind: "is-ready", probe });
      });
      this.#readiness = asked;
      void asked.then(() => {
        if (this.#readiness === asked) this.#readiness = undefined;
      });
    }
    const inFlight = this.#readiness;
    return new Promise<true | string>((resolve) => {
      const timer = setTimeout(() => resolve(waited), READINESS_TIMEOUT_MS);
      timer.unref();
      void inFlight.then((answer) => {
        clearTimeout(timer);
        resolve(answer);
      });
    });
  }

  /** The stub's process id (while up). */
  get pid(): number | undefined {
    return this.#host.info?.pid;
  }

  async execute(requests: readonly InferenceRequest[]): Promise<ExecuteResult> {
    const start = now();
    try {
      await this.#host.ready();
    } catch (error) {
      return failAll(requests, toInferenceError(error), start);
    }
    const keys: number[] = [];
    const decoupled = this.#options.init.decoupled;
    let wires: PyRequest[];
    let placed: (Tensor | ShmTensor)[][] | undefined;
    if (requests.some((r) => r.inputs.some((t) => t.device))) {
      try {
        placed = await this.#placeInputs(requests);
      } catch (error) {
        return failAll(requests, toInferenceError(error), start);
      }
    }
    try {
      const pool = this.#shm();
      wires = requests.map((request, i) => {
        const key = this.#host.open({
          signal: request.signal,
          trace: request.trace,
          priority: priorityOf(request),
          respond: (response, final) =>
            decoupled ? this.#respond(key, request, response, final) : this.#answerLate(key, request, response),
          fail: (error) => (decoupled ? request.responder?.(error, true) : this.#settleLate(key, error)),
        });
        keys.push(key);
        // A rescheduled request: what it held for its last execution, it holds for this one.
        const carrier = request.iteration ? this.#carried.get(request.iteration) : undefined;
        if (carrier !== undefined) this.#bls.reparent(carrier, key);
        return toPyRequest(key, request, pool, this.#options.init.outputs, placed?.[i]);
      });
    } catch (error) {
      for (const key of keys) this.#host.end(key);
      return failAll(requests, toInferenceError(error), start);
    }
    const inputNs = now() - start;
    let result: PyResult;
    this.#executing++;
    try {
      const release = this.#release;
      this.#release = [];
      result = await this.#host.execute({ requests: wires, release });
    } catch (error) {
      this.#doneExecuting();
      for (const key of keys) this.#late.delete(key);
      const failure = toInferenceError(error);
      for (const [i, key] of keys.entries()) if (this.#host.end(key)) requests[i]?.responder?.(failure, true);
      return failAll(requests, failure, start);
    }
    try {
      // Answers whose final flag the model sends after execute returned (Triton allows it): the
      // batch ends with the last of them.
      const late = new Map<number, LateAnswer>();
      if (!decoupled && result.deferred && !result.error) {
        const answers = await Promise.all(result.deferred.map((i) => this.#awaitLate(keys[i] as number)));
        for (const [n, i] of result.deferred.entries()) late.set(i, answers[n] as LateAnswer);
      }
      return await this.#executed(requests, keys, result, start, inputNs, late);
    } finally {
      this.#doneExecuting();
      if (!decoupled) for (const key of keys) this.#late.delete(key);
    }
  }

  /** A non-decoupled request's answer sent after execute returned: its one final `response`. */
  #answerLate(key: number, request: InferenceRequest, response: PyResponse | undefined): void {
    if (!response) {
      this.#settleLate(key, new InferenceError("BACKEND_FAILED", { message: "the model returned no response" }));
      return;
    }
    // Taken at once: the stub's blocks it names are released by the frames that follow it.
    const outputs = this.#outputs(request, response);
    if (outputs instanceof Promise) void outputs.then((o) => this.#settleLate(key, o, response.parameters));
    else this.#settleLate(key, outputs, response.parameters);
  }

  #settleLate(key: number, outcome: Tensor[] | Error, parameters?: Parameters): void {
    let entry = this.#late.get(key);
    if (!entry) {
      entry = {};
      this.#late.set(key, entry);
    }
    if (entry.outcome) return;
    entry.outcome = outcome;
    if (parameters) entry.parameters = parameters;
    entry.settle?.();
  }

  #awaitLate(key: number): Promise<LateAnswer> {
    let entry = this.#late.get(key);
    if (!entry) {
      entry = {};
      this.#late.set(key, entry);
    }
    const known = entry;
    return new Promise<LateAnswer>((resolve) => {
      const done = () => {
        this.#late.delete(key);
        resolve(known);
      };
      if (known.outcome) done();
      else known.settle = done;
    });
  }

  #doneExecuting(): void {
    if (--this.#executing > 0) return;
    const dropped = this.#droppedMeanwhile;
    this.#droppedMeanwhile = [];
    this.#bls.drop(dropped);
    const loans = this.#ipcDropsMeanwhile;
    this.#ipcDropsMeanwhile = [];
    this.#ipc.drop(loans);
    if (this.#releasedMeanwhile.length === 0) return;
    const blocks = this.#releasedMeanwhile;
    this.#releasedMeanwhile = [];
    this.#pool?.release(blocks);
  }

  /** Run `finalize` (for at most `graceMs`), then stop the process and remove its shared memory. */
  async close(graceMs = 5000): Promise<void> {
    await this.#host.close(graceMs);
    this.#pool?.close();
    this.#pool = undefined;
    this.#options.metrics.dropOwner(this.#prefix);
  }

  #shm(): ShmPool {
    if (!this.#pool) {
      const pool = new ShmPool(this.#prefix, this.#options.mapper, (s, o) => {
        if (this.#pool !== pool) return;
        this.#release.push([s, o]);
        this.#scheduleRelease();
      });
      this.#pool = pool;
    }
    return this.#pool;
  }

  #onMessage(message: PyProtocol["fromInstance"]): void {
    switch (message.kind) {
      case "release":
        if (this.#executing > 0) this.#releasedMeanwhile.push(...message.blocks);
        else this.#pool?.release(message.blocks);
        return;
      case "bls": {
        if (message.request.inputs.some((t) => t.ipc)) {
          void this.#blsWithIpc(message);
          return;
        }
        let wire: WireBlsRequest;
        try {
          const inputs = message.request.inputs;
          wire = {
            ...message.request,
            // A held device tensor goes on as its reference: BlsCalls lends it to the call.
            inputs: inputs.map((t) => {
              if (t.device)
                return { name: t.name, datatype: t.datatype, shape: t.shape, data: NO_BYTES, device: t.device };
              const { name, datatype, shape, data } = this.#take([t])[0] as Tensor;
              return { name, datatype, shape, data };
            }),
          };
        } catch (error) {
          this.#host.post({
            kind: "bls-reply",
            call: message.call,
            error: { message: (error as Error).message, code: "INTERNAL" },
            final: true,
          });
          return;
        }
        void this.#bls.run(message.call, wire, message.stream, message.parents);
        return;
      }
      case "device-export":
        void this.#deviceExport(message.call, message.ref);
        return;
      case "ipc-drop":
        // As with bls-drop: the answer that returns one of these loans is read a microtask later.
        if (this.#executing > 0) this.#ipcDropsMeanwhile.push(...message.keys);
        else this.#ipc.drop(message.keys);
        return;
      case "bls-cancel":
        this.#bls.cancel(message.call);
        return;
      case "bls-drop":
        // As with released blocks: the answer that returns one of these is read a microtask later.
        if (this.#executing > 0) this.#droppedMeanwhile.push(...message.refs);
        else this.#bls.drop(message.refs);
        return;
      case "metric": {
        let reply: { value?: number; error?: string };
        try {
          reply = { value: this.#options.metrics.apply(this.#prefix, message.request) };
        } catch (error) {
          reply = { error: (error as Error).message };
        }
        this.#host.post({ kind: "reply", call: message.call, ...reply });
        return;
      }
      case "metric-drop":
        for (const request of message.requests) {
          try {
            this.#options.metrics.apply(this.#prefix, request);
          } catch (error) {
            // As Triton's stub, a failed delete is only reported.
            this.#options.log.warn(`${this.name}: deleting a custom metric: ${(error as Error).message}`);
          }
        }
        return;
      case "model-control":
        void this.#modelControl(message.call, message.request);
        return;
      case "ready": {
        const answer = this.#probes.get(message.probe);
        this.#probes.delete(message.probe);
        answer?.(
          message.error ??
            (message.ready === true ? true : `Model '${this.name}' is not ready (user-defined check failed).`),
        );
        return;
      }
      case "log":
        if (message.level === "verbose") this.#options.log.verbose(1, `${this.name}: ${message.message}`);
        else this.#options.log[message.level](`${this.name}: ${message.message}`);
        return;
      default:
        return;
    }
  }

  /** `pb_utils.load_model` / `unload_model` / `is_model_ready`, answered with a `reply`. */
  async #modelControl(call: number, request: ModelControlOp): Promise<void> {
    const path = this.#options.inference();
    let reply: { value?: boolean; error?: string };
    try {
      switch (request.op) {
        case "load": {
          if (!path.loadModel) throw new Error("this server cannot load models");
          const files = new Map(
            Object.entries(request.files ?? {}).map(([k, v]) => [k, new Uint8Array(Buffer.from(v, "base64"))] as const),
          );
          await path.loadModel(request.model, "", () => ({
            ...(request.config !== "" ? { config: request.config } : {}),
            files,
          }));
          reply = {};
          break;
        }
        case "unload":
          if (!path.unloadModel) throw new Error("this server cannot unload models");
          await path.unloadModel(request.model, "", () => request.unloadDependents);
          reply = {};
          break;
        case "ready":
          // As Triton's: an unknown model (or version) is not ready, not an error.
          reply = { value: (await path.modelReady?.(request.model, request.version).catch(() => false)) ?? false };
          break;
      }
    } catch (error) {
      reply = { error: (error as Error).message };
    }
    this.#host.post({ kind: "reply", call, ...reply });
  }

  /** Tensors in the stub's segments: copies, or views lent until collected (see `ShmPool`). */
  #take(refs: readonly ShmTensor[]): Tensor[] {
    const pool = this.#shm();
    const tensors = refs.map((ref): Tensor => {
      const { data, lent } = pool.take(ref);
      return {
        name: ref.name,
        datatype: ref.datatype as Tensor["datatype"],
        shape: ref.shape,
        data,
        parameters: {},
        // A lent view must stay here: moved to a worker, its mapping could be collected here
        // while the worker still reads it.
        movable: !lent,
      };
    });
    return tensors;
  }

  /**
   * Give the stub's blocks back: with the next batch, or after a moment without one (a decoupled
   * model's responses, BLS calls), so that a busy instance sends no message for it.
   */
  #scheduleRelease(): void {
    if (this.#releaseScheduled || this.#release.length === 0) return;
    this.#releaseScheduled = true;
    setTimeout(() => {
      this.#releaseScheduled = false;
      const blocks = this.#release;
      this.#release = [];
      if (blocks.length > 0) this.#host.post({ kind: "release", blocks });
    }, RELEASE_DELAY_MS).unref();
  }

  async #executed(
    requests: readonly InferenceRequest[],
    keys: number[],
    result: PyResult,
    start: bigint,
    inputNs: bigint,
    late: ReadonlyMap<number, LateAnswer>,
  ): Promise<ExecuteResult> {
    const inferNs = now() - start - inputNs;
    const outputStart = now();
    const decoupled = this.#options.init.decoupled;
    const { responses, error } = result;
    const reschedules = this.#options.reschedules === true;
    const rescheduled = new Set(error ? [] : result.rescheduled);
    const answers: (Outcome | Promise<Outcome>)[] = requests.map((request, i) => {
      if (error) return this.#failed(request, error, result.sent?.[i]);
      if (rescheduled.has(i)) return reschedules ? [] : new InferenceError("RESCHEDULE_UNSUPPORTED");
      if (decoupled) return [];
      const answer = late.get(i);
      if (answer?.outcome) return answer.outcome;
      const response = responses?.[i];
      if (!response) return new InferenceError("BACKEND_FAILED", { message: "the model returned no response" });
      return this.#outputs(request, response);
    });
    // GPU tensors of the stub's are mapped before the batch's answers go on (rare: host tensors are taken at once).
    const outcome = answers.some((a) => a instanceof Promise) ? await Promise.all(answers) : (answers as Outcome[]);
    for (const [i, key] of keys.entries()) {
      const failure = outcome[i];
      // A rescheduled request's next execution opens it again, under a new key.
      if (reschedules && rescheduled.has(i)) this.#carry(requests[i]?.iteration, key);
      if (!decoupled || (reschedules && rescheduled.has(i))) this.#host.end(key);
      else if (failure instanceof Error && this.#host.end(key)) requests[i]?.responder?.(failure, true);
    }
    const parameterOf = (i: number) =>
      late.get(i)?.parameters ?? (error ? result.sent?.[i]?.response : responses?.[i])?.parameters;
    const parameters =
      !decoupled &&
      requests.some((_, i) => !(outcome[i] instanceof Error) && Object.keys(parameterOf(i) ?? {}).length > 0)
        ? requests.map((_, i) => parameterOf(i))
        : undefined;
    return {
      responses: outcome,
      ...(parameters ? { parameters } : {}),
      ...(reschedules && rescheduled.size > 0 ? { rescheduled: [...rescheduled] } : {}),
      computeInputNs: inputNs,
      computeInferNs: inferNs,
      computeOutputNs: now() - outputStart,
    };
  }

  /**
   * A non-decoupled request of a batch whose `execute` raised. Nothing sent: the error. A response
   * sent with its final flag: that response, as in Triton, where the request had ended with it
   * (the error is logged). A response sent without it: Triton's frontends then get the response and
   * the error after it, two responses for a one-response request; a stream
   * (`InferenceRequest.streamed`) writes the first and drops the rest, HTTP and gRPC's ModelInfer
   * answer "expected a single response, got 2".
   */
  #failed(
    request: InferenceRequest,
    error: PyError,
    sent: { response: PyResponse; final: boolean } | null | undefined,
  ): Outcome | Promise<Outcome> {
    const failure = modelError(error.message, error.code);
    if (!sent) return failure;
    // Taken either way: the stub's blocks it names are given back once read.
    const outputs = this.#outputs(request, sent.response);
    const decide = (outputs: Outcome): Outcome => {
      if (sent.final || request.streamed) {
        this.#options.log.error(`${this.name}: ${error.message}`);
        return outputs;
      }
      release(outputs);
      return new InferenceError("BACKEND_FAILED", { message: "expected a single response, got 2" });
    };
    return outputs instanceof Promise ? outputs.then(decide) : decide(outputs);
  }

  /** What the rescheduled request `key` holds waits for its next execution. */
  #carry(iteration: object | undefined, key: number): void {
    if (!iteration) return;
    let carrier = this.#carried.get(iteration);
    if (carrier === undefined) {
      carrier = this.#nextCarrier--;
      this.#carried.set(iteration, carrier);
      this.#carriers.register(iteration, carrier);
    }
    this.#bls.reparent(key, carrier);
  }

  /**
   * One response of a decoupled request (the host has already forgotten a final one). Responses
   * whose GPU tensors are being mapped hold back those after them, which keep their order.
   */
  #respond(key: number, request: InferenceRequest, response: PyResponse | undefined, final: boolean): void {
    const responder = request.responder;
    const outputs = response && this.#outputs(request, response);
    if (!responder) {
      // Nobody listens: GPU tensors mapped for it are let go.
      if (outputs instanceof Promise) void outputs.then((o) => release(o));
      return;
    }
    const deliver = (outputs: Outcome | undefined) => {
      if (outputs instanceof Error) {
        if (!final) this.#host.end(key);
        responder(outputs, true);
      } else responder(outputs && response ? { outputs, parameters: response.parameters ?? {} } : undefined, final);
    };
    const before = this.#responding.get(key);
    if (!before && !(outputs instanceof Promise)) {
      deliver(outputs);
      return;
    }
    const turn = (before ?? Promise.resolve()).then(() => outputs).then(deliver);
    this.#responding.set(key, turn);
    void turn.then(() => {
      if (this.#responding.get(key) === turn) this.#responding.delete(key);
    });
  }

  /**
   * A response's outputs, checked against the config, or why the request fails. Host tensors are
   * taken at once (the stub's blocks they name are released by the frames that follow); GPU
   * tensors of the stub's are mapped here first, so the answer is then a promise.
   */
  #outputs(request: InferenceRequest, response: PyResponse): Outcome | Promise<Outcome> {
    let outputs: (Tensor | Promise<Tensor>)[];
    try {
      // A held device tensor returned as an output gets a handle of its own (see BlsCalls.output).
      outputs = response.outputs.map((t) => {
        if (t.device) return this.#bls.output({ ...t, data: NO_BYTES });
        if (t.ipc) return this.#mapped(t, t.ipc);
        return this.#take([t])[0] as Tensor;
      });
    } catch (error) {
      return toInferenceError(error);
    }
    const check = (outputs: Tensor[]): Outcome => {
      if (response.error) {
        for (const o of outputs) o.device?.release();
        return modelError(response.error.message, response.error.code);
      }
      const problem = checkOutputs(this.#options.outputRules, request, outputs);
      if (problem) for (const o of outputs) o.device?.release();
      return problem ?? outputs;
    };
    if (!outputs.some((o) => o instanceof Promise)) return check(outputs as Tensor[]);
    return Promise.allSettled(outputs).then((settled) => {
      const made = settled.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
      const failed = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
      if (!failed) return check(made);
      for (const o of made) o.device?.release();
      return toInferenceError(failed.reason);
    });
  }

  /** The model's own GPU memory as a tensor here: mapped, and borrowed until the response is done with it. */
  async #mapped(t: { name: string; datatype: string; shape: number[] }, ipc: IpcTensor): Promise<Tensor> {
    const device = await this.#ipc.map(ipc, (key) => this.#host.post({ kind: "ipc-release", keys: [key] }));
    return {
      name: t.name,
      datatype: t.datatype as Tensor["datatype"],
      shape: t.shape,
      data: NO_BYTES,
      parameters: {},
      device,
    };
  }
}

/** A request as the stub reads it, its inputs written into the instance's segments. */
function toPyRequest(
  key: number,
  request: InferenceRequest,
  pool: ShmPool,
  modelOutputs: readonly string[],
  placed?: readonly (Tensor | ShmTensor)[],
): PyRequest {
  const sequenceId = request.parameters.sequence_id;
  const timeout = request.parameters.timeout;
  let parameters: Parameters | undefined;
  for (const name in request.parameters) {
    if (RESERVED_PARAMETERS.has(name)) continue;
    parameters ??= {};
    parameters[name] = request.parameters[name] as Parameters[string];
  }
  return {
    key,
    id: request.id,
    correlationId:
      typeof sequenceId === "string"
        ? sequenceId
        : typeof sequenceId === "bigint"
          ? Number(sequenceId)
          : ((sequenceId ?? 0) as number),
    flags: (request.parameters.sequence_start === true ? 1 : 0) | (request.parameters.sequence_end === true ? 2 : 0),
    parameters: parameters
      ? JSON.stringify(parameters, (_k, v: unknown) => (typeof v === "bigint" ? Number(v) : v))
      : "{}",
    timeout: typeof timeout === "number" || typeof timeout === "bigint" ? Number(timeout) : 0,
    inputs: (placed ?? request.inputs).map((t) => ("parameters" in t ? pool.put(t) : t)),
    outputs: request.outputs.length > 0 ? request.outputs.map((o) => o.name) : [...modelOutputs],
    cancelled: request.signal?.aborted ?? false,
    ...(request.trace?.context !== undefined ? { traceContext: request.trace.context } : {}),
  };
}

function failAll(requests: readonly InferenceRequest[], error: Error, start: bigint): ExecuteResult {
  return {
    responses: requests.map(() => error),
    computeInputNs: 0n,
    computeInferNs: now() - start,
    computeOutputNs: 0n,
  };
}
