// BlsCalls' device tensors (issue 19): outputs a BLS call asked on a GPU are held by reference for
// the model, lent to later calls, given their own handle when returned, and let go when the model
// drops them, when the requests of the batch that made the call end, or with the instance. The
// device tensors here keep their bytes in host memory and count their handles, so the bookkeeping
// is what is tested (the H200 run covers the real thing: device-tensors-gpu.mjs).
import { describe, expect, it } from "vitest";
import type { InferenceRequest, InferenceResponse } from "../../base/inference-request.js";
import type { DeviceTensor } from "../../base/tensor.js";
import type { JsProtocol, WireBlsResponse, WireTensor } from "../js/js-messages.js";
import { BlsCalls } from "./bls-calls.js";

type Reply = Extract<JsProtocol["toInstance"], { kind: "bls-reply" }>;

/** A device tensor over host bytes that counts its live handles (views share the bytes). */
function counted(bytes: Uint8Array, live: { handles: number }, rowBytes = bytes.byteLength): DeviceTensor {
  live.handles++;
  let released = false;
  return {
    deviceId: 0,
    byteSize: bytes.byteLength,
    kind: "pytorch",
    toHost: async () => bytes.slice(),
    rows: (start, count) => counted(bytes.subarray(start * rowBytes, (start + count) * rowBytes), live, rowBytes),
    release: () => {
      if (!released) live.handles--;
      released = true;
    },
  };
}

function setup(open: Set<number>) {
  const live = { handles: 0 };
  const seen: InferenceRequest[] = [];
  const replies: Reply[] = [];
  const calls = new BlsCalls({
    traceOf: () => undefined,
    tracing: "parents",
    inference: () => ({
      async infer(request: InferenceRequest): Promise<InferenceResponse> {
        seen.push(request);
        const input = request.inputs[0];
        // "double": a GPU model that keeps its output on the device when asked to.
        const bytes = input?.device ? await input.device.toHost() : (input?.data ?? new Uint8Array());
        const out = Uint8Array.from(bytes, (b) => b * 2);
        const device = request.outputsOnDevice === 0 ? counted(out, live, 2) : undefined;
        return {
          modelName: request.modelName,
          modelVersion: "1",
          id: request.id,
          parameters: {},
          outputs: [
            {
              name: "OUT",
              datatype: "UINT8",
              shape: [out.byteLength / 2, 2],
              data: device ? new Uint8Array(0) : out,
              parameters: {},
              movable: false,
              ...(device ? { device } : {}),
            },
          ],
        };
      },
      stream: () => {
        throw new Error("not used");
      },
    }),
    reply: (message) => {
      if (message.kind === "bls-reply") replies.push(message);
    },
    signalOf: () => undefined,
    isOpen: (key) => open.has(key),
  });
  const call = async (number: number, input: WireTensor, gpu: boolean, parents: number[]) => {
    await calls.run(
      number,
      {
        model: "double",
        version: "",
        id: "",
        inputs: [input],
        outputs: [],
        parameters: {},
        ...(gpu ? { preferredMemory: { kind: "gpu" as const, deviceId: 0 } } : {}),
      },
      false,
      parents,
    );
    return replies.at(-1) as Reply;
  };
  return { calls, call, live, seen, replies };
}

const bytes = (...values: number[]): WireTensor => ({
  name: "IN",
  datatype: "UINT8",
  shape: [values.length / 2, 2],
  data: Uint8Array.from(values),
});
const outputOf = (reply: Reply) => (reply.response as WireBlsResponse).outputs[0] as WireTensor;

describe("BlsCalls' device tensors", () => {
  it("holds a GPU output by reference, lends it to the next call and lets it go when its request ends", async () => {
    const open = new Set([7]);
    const { calls, call, live, seen } = setup(open);
    const first = outputOf(await call(1, bytes(1, 2, 3, 4), true, [7]));
    expect(first.device).toEqual({ ref: 1, deviceId: 0, byteSize: 4 });
    expect(first.data.byteLength).toBe(0);
    expect(live.handles).toBe(1);
    // Passed on as an input: the callee gets the device tensor itself, not bytes.
    const second = outputOf(await call(2, { ...first, name: "IN" }, true, [7]));
    expect(seen[1]?.inputs[0]?.device?.byteSize).toBe(4);
    expect(seen[1]?.inputs[0]?.data.byteLength).toBe(0);
    expect(live.handles).toBe(2);
    // Lent, not given: the callee letting go of its input does not free the held tensor.
    seen[1]?.inputs[0]?.device?.release();
    expect(live.handles).toBe(2);
    // Returned as the model's output: a handle of its own, which outlives the request's end.
    const returned = calls.output({ ...second, name: "RESULT" });
    expect(returned.device).toBeDefined();
    expect([...(await (returned.device as DeviceTensor).toHost())]).toEqual([4, 8, 12, 16]);
    expect(live.handles).toBe(3);
    open.delete(7);
    calls.ended(7);
    expect(live.handles).toBe(1);
    returned.device?.release();
    expect(live.handles).toBe(0);
    // Gone: a later use says so with the tensor's name.
    expect(() => calls.output(second)).toThrow(
      /tensor 'OUT' was held on GPU 0 by an earlier BLS call and has been released/,
    );
  });

  it("gives a borrower that may outlive the hold (a Python stub mapping it) a handle of its own", async () => {
    const open = new Set([7]);
    const { calls, call, live } = setup(open);
    const held = outputOf(await call(1, bytes(1, 2, 3, 4), true, [7]));
    const ref = held.device?.ref as number;
    const own = calls.retained(ref);
    expect(live.handles).toBe(2);
    // The model drops the BLS output; the borrower still reads the memory.
    calls.drop([ref]);
    expect(live.handles).toBe(1);
    expect([...(await (own as DeviceTensor).toHost())]).toEqual([2, 4, 6, 8]);
    own?.release();
    expect(live.handles).toBe(0);
    expect(calls.retained(ref)).toBeUndefined();
  });

  it("lets go of what the model drops, of what its batch's other requests still hold only when they end, and of everything with the instance", async () => {
    const open = new Set([1, 2]);
    const { calls, call, live } = setup(open);
    const a = outputOf(await call(1, bytes(1, 1), true, [1, 2]));
    const b = outputOf(await call(2, bytes(2, 2), true, [1]));
    const c = outputOf(await call(3, bytes(3, 3), true, []));
    expect(live.handles).toBe(3);
    calls.drop([b.device?.ref as number]);
    expect(live.handles).toBe(2);
    calls.ended(1);
    expect(live.handles).toBe(2); // a: request 2 is still open; c: made outside any batch
    calls.ended(2);
    expect(live.handles).toBe(1);
    expect(c.device).toBeDefined();
    calls.cancelAll();
    expect(live.handles).toBe(0);
    expect(a.device?.ref).toBe(1);
  });

  it("keeps what a rescheduled request holds for its next execution (reparent), then lets it go when that one ends", async () => {
    const open = new Set([1]);
    const { calls, call, live } = setup(open);
    outputOf(await call(1, bytes(1, 1), true, [1]));
    expect(live.handles).toBe(1);
    // Rescheduled: key 1 ends, its holds wait under a stand-in (-1), then go on under key 2.
    calls.reparent(1, -1);
    calls.ended(1);
    expect(live.handles).toBe(1);
    calls.reparent(-1, 2);
    calls.ended(-1);
    expect(live.handles).toBe(1);
    calls.ended(2);
    expect(live.handles).toBe(0);
  });

  it("gives bytes without the GPU preference, and releases at once what is made for requests already ended", async () => {
    const open = new Set<number>();
    const { call, live } = setup(open);
    const plain = outputOf(await call(1, bytes(5, 6), false, [3]));
    expect(plain.device).toBeUndefined();
    expect([...plain.data]).toEqual([10, 12]);
    const late = outputOf(await call(2, bytes(5, 6), true, [3]));
    expect(late.device).toBeDefined();
    expect(live.handles).toBe(0);
  });

  it("answers a call naming a released tensor with Triton's INVALID_ARG and the tensor's name", async () => {
    const { call } = setup(new Set());
    const reply = await call(1, { ...bytes(), device: { ref: 99, deviceId: 0, byteSize: 4 } }, true, []);
    expect(reply.error?.code).toBe("INVALID_ARG");
    expect(reply.error?.message).toMatch(/tensor 'IN' was held on GPU 0 by an earlier BLS call and has been released/);
  });

  it("refuses a held tensor passed as another datatype or shape: only its name may change", async () => {
    const open = new Set([1]);
    const { calls, call, live } = setup(open);
    const held = outputOf(await call(1, bytes(1, 2, 3, 4), true, [1]));
    const reshaped = await call(2, { ...held, name: "IN", shape: [4, 1] }, true, [1]);
    expect(reshaped.error?.code).toBe("INVALID_ARG");
    expect(reshaped.error?.message).toBe(
      "tensor 'IN' is held on GPU 0 as UINT8 [2, 2]; it cannot be passed as UINT8 [4, 1] (only its name may change)",
    );
    expect(() => calls.output({ ...held, datatype: "INT8" })).toThrow(/as UINT8 \[2, 2\]; it cannot be passed as INT8/);
    expect(calls.output({ ...held, name: "RENAMED" })).toMatchObject({
      name: "RENAMED",
      datatype: "UINT8",
      shape: [2, 2],
    });
    expect(live.handles).toBe(2);
  });
});

describe("BlsCalls' cancellation", () => {
  it("links each call to its request's signal while it runs, and unlinks it after (a loop of many calls)", async () => {
    const parent = new AbortController();
    let listening = 0;
    const add = parent.signal.addEventListener.bind(parent.signal);
    const remove = parent.signal.removeEventListener.bind(parent.signal);
    parent.signal.addEventListener = ((...args: Parameters<typeof add>) => {
      listening++;
      add(...args);
    }) as typeof add;
    parent.signal.removeEventListener = ((...args: Parameters<typeof remove>) => {
      listening--;
      remove(...args);
    }) as typeof remove;
    const signals: AbortSignal[] = [];
    let release: () => void = () => {};
    const calls = new BlsCalls({
      traceOf: () => undefined,
      tracing: "parents",
      inference: () => ({
        async infer(request: InferenceRequest): Promise<InferenceResponse> {
          if (request.signal) signals.push(request.signal);
          if (request.id === "wait") await new Promise<void>((resolve) => (release = resolve));
          return { modelName: request.modelName, modelVersion: "1", id: request.id, parameters: {}, outputs: [] };
        },
        stream: () => {
          throw new Error("not used");
        },
      }),
      reply: () => {},
      signalOf: (key) => (key === 7 ? parent.signal : undefined),
      isOpen: () => true,
    });
    const wire = (id: string) => ({ model: "m", version: "", id, inputs: [], outputs: [], parameters: {} });
    for (let i = 1; i <= 50; i++) await calls.run(i, wire(""), false, [7]);
    expect(listening).toBe(0);
    const waiting = calls.run(51, wire("wait"), false, [7]);
    await new Promise((r) => setImmediate(r));
    expect(listening).toBe(1);
    parent.abort();
    expect(signals.at(-1)?.aborted).toBe(true);
    release();
    await waiting;
    expect(listening).toBe(0);
  });
});
