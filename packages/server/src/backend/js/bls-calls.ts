import { toInferenceError } from "../../core/errors.js";
import type { InferenceRequest, InferenceResponse, StreamedResponse } from "../../core/inference-request.js";
import {
  type JsProtocol,
  tensorFromWire,
  tensorToWire,
  type WireBlsRequest,
  type WireBlsResponse,
} from "./js-messages.js";

/** The server's inference path, for BLS calls. */
export interface InferencePath {
  infer(request: InferenceRequest): Promise<InferenceResponse>;
  stream(request: InferenceRequest): AsyncIterable<StreamedResponse>;
}

/** Where {@link BlsCalls} sends replies and finds the signals of the requests a call came from. */
export interface BlsCallsOptions {
  inference: () => InferencePath;
  reply(message: JsProtocol["toInstance"], transfer: readonly ArrayBuffer[]): void;
  /** The signal of an open request of the instance, by key. */
  signalOf(key: number): AbortSignal | undefined;
}

/**
 * One instance's BLS calls: a model's `infer` / `stream` run on the server's own inference path
 * and are answered message by message. A call ends when the model cancels it, when every request
 * of the batch that made it is cancelled (a call with no signal of its own), or with the instance.
 */
export class BlsCalls {
  readonly #options: BlsCallsOptions;
  readonly #calls = new Map<number, AbortController>();

  constructor(options: BlsCallsOptions) {
    this.#options = options;
  }

  /** Run the model's call number `call`. */
  async run(call: number, wire: WireBlsRequest, stream: boolean, parents: readonly number[]): Promise<void> {
    const controller = new AbortController();
    this.#calls.set(call, controller);
    const parentSignals = parents.flatMap((key) => this.#options.signalOf(key) ?? []);
    if (parents.length > 0 && parentSignals.length === parents.length) {
      const onAbort = () => {
        if (parentSignals.every((s) => s.aborted)) controller.abort();
      };
      for (const signal of parentSignals) signal.addEventListener("abort", onAbort, { once: true });
      onAbort();
    }
    const request: InferenceRequest = {
      modelName: wire.model,
      modelVersion: wire.version,
      id: wire.id,
      parameters: wire.parameters,
      inputs: wire.inputs.map(tensorFromWire),
      outputs: wire.outputs.map((name) => ({ name, parameters: {} })),
      signal: controller.signal,
    };
    const reply = (response: InferenceResponse | undefined, final: boolean, error?: unknown) => {
      // After the instance restarted, call numbers start again: a late answer must not reach the new one.
      if (this.#calls.get(call) !== controller) return;
      const transfer = new Set<ArrayBuffer>();
      const out: WireBlsResponse | undefined = response && {
        modelName: response.modelName,
        modelVersion: response.modelVersion,
        id: response.id,
        parameters: response.parameters,
        outputs: response.outputs.map((t) => tensorToWire(t, transfer)),
      };
      const failure = error === undefined ? undefined : toInferenceError(error);
      this.#options.reply(
        {
          kind: "bls-reply",
          call,
          ...(out ? { response: out } : {}),
          ...(failure ? { error: { message: failure.message, code: failure.code } } : {}),
          final,
        },
        [...transfer],
      );
    };
    try {
      const path = this.#options.inference();
      if (!stream) reply(await path.infer(request), true);
      else {
        let ended = false;
        for await (const item of path.stream(request)) {
          if (controller.signal.aborted) break;
          reply(item.empty ? undefined : item.response, item.final);
          ended = item.final;
        }
        if (!ended) reply(undefined, true);
      }
    } catch (error) {
      reply(undefined, true, error);
    } finally {
      if (this.#calls.get(call) === controller) this.#calls.delete(call);
    }
  }

  /** The model cancelled call number `call`. */
  cancel(call: number): void {
    this.#calls.get(call)?.abort();
  }

  /** The instance is gone: every call it made is cancelled. */
  cancelAll(): void {
    for (const controller of this.#calls.values()) controller.abort();
    this.#calls.clear();
  }
}
