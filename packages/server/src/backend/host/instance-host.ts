import { backendError, InferenceError } from "../../base/errors.js";
import type { Logger } from "../../base/log.js";
import type { Trace } from "../../base/trace.js";
import type { HostToInstance, InstanceProtocol, InstanceToHost } from "./host-messages.js";
import type { InstanceTransport, TransportFactory } from "./instance-transport.js";
import { RestartBackoff } from "./restart-backoff.js";

/**
 * Where a host's instance stands: `starting` (at first or in a restart: work waits for it), `up`,
 * `restarting` (waiting out the back-off after a failure: work fails at once with
 * MODEL_INSTANCE_RESTARTING) or `closed`.
 */
export type InstanceHealth = "starting" | "up" | "restarting" | "closed";

/** A request the instance may answer several times (a decoupled model) or be told to cancel. */
export interface HostedRequest<Response> {
  /** Aborting it sends the instance a `cancel` for the request. */
  readonly signal?: AbortSignal | undefined;
  /** The request's trace, when it is traced: calls it makes (BLS) are traced as its children. */
  readonly trace?: Trace | undefined;
  /** The request's `priority` parameter, when it has one: calls it makes (BLS) inherit it. */
  readonly priority?: number | undefined;
  /** A response from the instance; `final` ends the request (the host forgets it first). */
  respond(response: Response | undefined, final: boolean): void;
  /** The instance went away while it held the request, which has ended. */
  fail(error: InferenceError): void;
}

/**
 * Runs one model instance off the event loop, through a transport, and supervises it: start with
 * a timeout and an abort signal; batches and their results; requests answered several times and
 * their cancellation; health; when the instance dies, everything in flight fails with one
 * BACKEND_FAILED error (`model instance '<name>' <reason>; the instance is restarting`) and it
 * restarts with back-off (see `RestartBackoff`); close, graceful then forced.
 */
export interface InstanceHost<P extends InstanceProtocol> {
  readonly name: string;
  readonly health: InstanceHealth;
  /** What the instance reported when it last started. */
  readonly info: P["info"] | undefined;
  /** How many times the instance was restarted after a failure. */
  readonly restarts: number;
  /**
   * Start the instance; rejects with its own message when it fails to start, past the start
   * timeout, or when `signal` aborts, and the host is then closed.
   */
  start(signal?: AbortSignal): Promise<P["info"]>;
  /** Resolves once the instance is up (waiting for a restart in progress); rejects with why it is not. */
  ready(): Promise<void>;
  /** Send a batch; resolves with the instance's result, rejects with an InferenceError when it cannot have one. */
  execute(batch: P["batch"], transfer?: readonly ArrayBuffer[]): Promise<P["result"]>;
  /** Register a request; returns the key the instance's responses and the host's cancel name it by. */
  open(request: HostedRequest<P["response"]>): number;
  /** Forget a request; false when it had already ended. */
  end(key: number): boolean;
  /** A request still open. */
  request(key: number): HostedRequest<P["response"]> | undefined;
  /** Send one of the backend's own messages (dropped while no instance runs). */
  post(message: P["toInstance"], transfer?: readonly ArrayBuffer[]): void;
  /** End the running instance as failed with `reason` (`ran out of memory ...`): it restarts. */
  fail(reason: string): void;
  /**
   * Restart now an instance that waits for work to restart it (`restartOnRequest`): one whose
   * process another instance shares has started again. Nothing otherwise.
   */
  revive(): void;
  /**
   * Ask the instance to stop and wait up to `graceMs` (default 5000; not for one still starting,
   * nor for one still executing: an unload that stopped waiting for it), then end it.
   */
  close(graceMs?: number): Promise<void>;
}

/** Options for {@link createInstanceHost}. */
export interface InstanceHostOptions<P extends InstanceProtocol> {
  /** The instance's name (`<group>_<n>`), in every message about it. */
  name: string;
  /** The model's name, for MODEL_INSTANCE_RESTARTING. */
  model: string;
  transport: TransportFactory<HostToInstance<P>, InstanceToHost<P>>;
  /** Sent to every fresh instance (at the start and at each restart). */
  init: P["init"];
  /** `initialize_timeout_ms`: a start that takes longer fails; 0 or absent: none. */
  startTimeoutMs?: number;
  /** `execute_timeout_ms`: a batch that takes longer ends the instance; 0 or absent: none. */
  executeTimeoutMs?: number;
  /**
   * Restart a failed instance only when work next comes for it, failing that work with this
   * error's message (Triton's Python backend: the model is not ready until a request restarts
   * its stub); absent: restart at once, with back-off.
   */
  restartOnRequest?: (name: string) => InferenceError;
  log: Logger;
  /** The backend's own messages from the instance. */
  onMessage?(message: P["fromInstance"]): void;
  /** The running instance went away: what only the backend tracks for it fails with `error`. */
  onDown?(error: InferenceError): void;
  /** A request was ended (answered for good, failed or abandoned): what the instance keeps for it can go. */
  onEnded?(key: number): void;
}

/** Create a host; nothing runs until {@link InstanceHost.start}. */
export function createInstanceHost<P extends InstanceProtocol>(options: InstanceHostOptions<P>): InstanceHost<P> {
  return new Host(options);
}

interface Pending<R> {
  resolve(result: R): void;
  reject(error: InferenceError): void;
  timer?: NodeJS.Timeout;
}

const HOST_KINDS = new Set(["started", "start-failed", "executed", "response", "stopped"]);

class Host<P extends InstanceProtocol> implements InstanceHost<P> {
  readonly name: string;
  info: P["info"] | undefined;
  restarts = 0;
  readonly #options: InstanceHostOptions<P>;
  #transport: InstanceTransport<HostToInstance<P>> | undefined;
  #health: InstanceHealth = "starting";
  /** Settles when the current instance has started; rejects when it fails to. */
  #ready: Promise<void> = Promise.resolve();
  #settle: { resolve(): void; reject(error: Error): void } | undefined;
  /** Whether an instance ever started: failures before that fail the start instead of restarting. */
  #started = false;
  /** Whether a first start that lost its shared thread was tried again (once). */
  #startRetried = false;
  #upSince = 0;
  readonly #backoff = new RestartBackoff();
  #retry: { timer?: NodeJS.Timeout; at: number; reason: string } | undefined;
  #startTimer: NodeJS.Timeout | undefined;
  /** Why the current instance is being ended (a timeout, an abort), to word its failure. */
  #killReason: string | undefined;
  #closing: Promise<void> | undefined;
  #onStopped: (() => void) | undefined;
  #nextBatch = 1;
  #nextKey = 1;
  readonly #batches = new Map<number, Pending<P["result"]>>();
  readonly #requests = new Map<number, { request: HostedRequest<P["response"]>; onAbort?: () => void }>();

  constructor(options: InstanceHostOptions<P>) {
    this.name = options.name;
    this.#options = options;
  }

  get health(): InstanceHealth {
    return this.#health;
  }

  async start(signal?: AbortSignal): Promise<P["info"]> {
    const onAbort = () => this.#kill("was unloaded while it was initializing");
    this.#spawn();
    if (signal?.aborted) onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      await this.#ready;
    } catch (error) {
      await this.close(0);
      throw error;
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
    return this.info;
  }

  async ready(): Promise<void> {
    // An instance that died while this waited is replaced by another, which is waited for in turn.
    while (this.#health === "starting") await this.#ready;
    if (this.#retry && this.#retry.timer === undefined && this.#options.restartOnRequest) {
      // Restarted by this work, which fails as Triton's does; the next waits for the new instance.
      this.#retry = undefined;
      this.#spawn();
      throw this.#options.restartOnRequest(this.name);
    }
    if (this.#retry) throw this.#unavailable(this.#retry);
    if (this.#health !== "up") throw this.#unloaded();
  }

  async execute(batch: P["batch"], transfer: readonly ArrayBuffer[] = []): Promise<P["result"]> {
    try {
      await this.ready();
    } catch (error) {
      throw backendError(error);
    }
    const id = this.#nextBatch++;
    return new Promise<P["result"]>((resolve, reject) => {
      const pending: Pending<P["result"]> = { resolve, reject };
      const timeout = this.#options.executeTimeoutMs ?? 0;
      if (timeout > 0) {
        pending.timer = setTimeout(
          () => this.#kill(`did not finish execute within ${timeout} ms (execute_timeout_ms)`),
          timeout,
        );
      }
      this.#batches.set(id, pending);
      try {
        this.#transport?.send({ kind: "execute", batch: id, payload: batch }, transfer);
      } catch (error) {
        clearTimeout(pending.timer);
        this.#batches.delete(id);
        reject(backendError(error));
      }
    });
  }

  open(request: HostedRequest<P["response"]>): number {
    const key = this.#nextKey++;
    const entry: { request: HostedRequest<P["response"]>; onAbort?: () => void } = { request };
    if (request.signal) {
      // Through a local: a function literal assigned to a property is made in the old
      // generation and keeps the request from young collections (development.md).
      const onAbort = () => this.#transport?.send({ kind: "cancel", key });
      entry.onAbort = onAbort;
      request.signal.addEventListener("abort", onAbort, { once: true });
    }
    this.#requests.set(key, entry);
    return key;
  }

  end(key: number): boolean {
    const entry = this.#requests.get(key);
    if (!entry) return false;
    this.#requests.delete(key);
    if (entry.onAbort) entry.request.signal?.removeEventListener("abort", entry.onAbort);
    this.#options.onEnded?.(key);
    return true;
  }

  request(key: number): HostedRequest<P["response"]> | undefined {
    return this.#requests.get(key)?.request;
  }

  post(message: P["toInstance"], transfer: readonly ArrayBuffer[] = []): void {
    this.#transport?.send(message, transfer);
  }

  fail(reason: string): void {
    this.#kill(reason);
  }

  revive(): void {
    if (this.#health !== "restarting" || !this.#retry || this.#retry.timer !== undefined) return;
    this.#retry = undefined;
    this.#spawn();
  }

  close(graceMs = 5000): Promise<void> {
    this.#closing ??= this.#close(graceMs);
    return this.#closing;
  }

  async #close(graceMs: number): Promise<void> {
    const up = this.#health === "up";
    // `finalize` would run only once the batches out return, which an unload no longer waits for.
    const executing = this.#batches.size > 0;
    this.#health = "closed";
    clearTimeout(this.#retry?.timer);
    this.#retry = undefined;
    clearTimeout(this.#startTimer);
    const transport = this.#transport;
    // What a request still waiting for this instance's start is told.
    this.#killReason = "was unloaded";
    if (transport && graceMs > 0 && up && !executing) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, graceMs);
        this.#onStopped = () => {
          clearTimeout(timer);
          resolve();
        };
        try {
          transport.send({ kind: "stop" });
        } catch {
          this.#onStopped();
        }
      });
      this.#onStopped = undefined;
    }
    if (executing) this.#options.log.warn(`model instance '${this.name}' is still executing at unload: ending it`);
    this.#failAll(
      executing
        ? new InferenceError("BACKEND_FAILED", {
            message: `model instance '${this.name}' was unloaded before its execute returned`,
          })
        : this.#unloaded(),
    );
    await transport?.kill();
  }

  /** Start a fresh instance; `again` keeps the start already awaited (a first start tried once more). */
  #spawn(again = false): void {
    this.#killReason = undefined;
    this.#health = "starting";
    this.#upSince = 0;
    if (!again) {
      this.#ready = new Promise<void>((resolve, reject) => {
        this.#settle = { resolve, reject };
      });
      // Nobody may be waiting yet; a failed start is reported to the next caller.
      this.#ready.catch(() => undefined);
    }
    const transport: InstanceTransport<HostToInstance<P>> = this.#options.transport({
      message: (message) => {
        if (transport === this.#transport) this.#onMessage(message);
      },
      ended: (reason, lostThread) => this.#onEnded(transport, reason, lostThread),
    });
    this.#transport = transport;
    const timeout = this.#options.startTimeoutMs ?? 0;
    if (timeout > 0) {
      this.#startTimer = setTimeout(
        () => this.#kill(`did not finish initialize within ${timeout} ms (initialize_timeout_ms)`),
        timeout,
      );
    }
    transport.send({ kind: "start", init: this.#options.init });
  }

  #onMessage(message: InstanceToHost<P>): void {
    if (!HOST_KINDS.has(message.kind)) {
      this.#options.onMessage?.(message as P["fromInstance"]);
      return;
    }
    const known = message as Exclude<InstanceToHost<P>, P["fromInstance"]>;
    switch (known.kind) {
      case "started":
        clearTimeout(this.#startTimer);
        this.info = known.info;
        this.#health = "up";
        this.#started = true;
        this.#upSince = performance.now();
        this.#settle?.resolve();
        return;
      case "start-failed":
        // A failed first start reports the model's own message.
        if (!this.#started) this.#settle?.reject(new Error(known.message));
        this.#onEnded(this.#transport, `failed to initialize: ${known.message}`);
        return;
      case "executed": {
        const pending = this.#batches.get(known.batch);
        if (!pending) return;
        this.#batches.delete(known.batch);
        clearTimeout(pending.timer);
        pending.resolve(known.result);
        return;
      }
      case "response": {
        const request = this.#requests.get(known.key)?.request;
        if (!request) return;
        // Ended after its last response is taken: what the instance holds for it is still there.
        try {
          request.respond(known.response, known.final);
        } finally {
          if (known.final) this.end(known.key);
        }
        return;
      }
      case "stopped":
        this.#onStopped?.();
        return;
    }
  }

  /**
   * The instance is gone or failed to start: fail what it held and, unless closing or never
   * started, start a fresh one, at once after a first failure and later after repeated ones.
   */
  #onEnded(transport: InstanceTransport<HostToInstance<P>> | undefined, what: string, lostThread = false): void {
    if (!transport || transport !== this.#transport) return;
    this.#transport = undefined;
    clearTimeout(this.#startTimer);
    void transport.kill();
    this.#onStopped?.();
    // A first start whose shared thread a neighbour ended (not this host's own kill) goes again, once.
    const again = lostThread && this.#killReason === undefined && !this.#started && !this.#startRetried;
    const reason = this.#killReason ?? what;
    this.#killReason = undefined;
    const { name } = this;
    if (again && this.#health !== "closed") {
      this.#startRetried = true;
      this.#options.log.warn(`model instance '${name}' ${reason} while starting; starting it again`);
      this.#spawn(true);
      return;
    }
    if (this.#health === "closed" || !this.#started) {
      this.#settle?.reject(new Error(`model instance '${name}' ${reason}`));
      return;
    }
    if (this.#options.restartOnRequest) {
      this.restarts++;
      this.#options.log.error(`model instance '${name}' ${reason}; it restarts when a request next comes for it`);
      const failure = new InferenceError("BACKEND_FAILED", { message: `model instance '${name}' ${reason}` });
      this.#failAll(failure);
      this.#health = "restarting";
      this.#retry = { at: Number.NaN, reason };
      this.#settle?.reject(failure);
      return;
    }
    const delay = this.#backoff.next(this.#upSince > 0 ? performance.now() - this.#upSince : 0);
    this.restarts++;
    this.#options.log.error(`model instance '${name}' ${reason}; restarting it${delay > 0 ? ` in ${delay} ms` : ""}`);
    const failure = new InferenceError("BACKEND_FAILED", {
      message: `model instance '${name}' ${reason}; the instance is restarting`,
    });
    this.#failAll(failure);
    if (delay === 0) {
      this.#settle?.reject(failure);
      this.#spawn();
      return;
    }
    this.#health = "restarting";
    const retry = {
      timer: setTimeout(() => {
        this.#retry = undefined;
        this.#spawn();
      }, delay),
      at: performance.now() + delay,
      reason,
    };
    // A pending restart alone does not keep the process alive.
    retry.timer.unref();
    this.#retry = retry;
    this.#settle?.reject(this.#unavailable(retry));
  }

  #kill(reason: string): void {
    if (!this.#transport) return;
    this.#killReason = reason;
    void this.#transport.kill();
  }

  /** Why work for this instance fails at once while it waits to restart. */
  #unavailable(retry: { at: number; reason: string }): InferenceError {
    return new InferenceError("MODEL_INSTANCE_RESTARTING", {
      model: this.#options.model,
      instance: this.name,
      reason: retry.reason,
      ms: Math.max(0, Math.ceil(retry.at - performance.now())),
    });
  }

  #unloaded(): InferenceError {
    return new InferenceError("BACKEND_FAILED", { message: `model instance '${this.name}' was unloaded` });
  }

  #failAll(error: InferenceError): void {
    for (const [id, pending] of this.#batches) {
      clearTimeout(pending.timer);
      this.#batches.delete(id);
      pending.reject(error);
    }
    for (const [key, { request }] of this.#requests) {
      this.end(key);
      request.fail(error);
    }
    this.#options.onDown?.(error);
  }
}
