// repeat_int32 (Triton's `repeat` backend, as a scripted model): decoupled, one response per
// element of IN, each DELAY[i] ms after the previous one, then a flag-only final response.

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });

/** @implements {import("@galley/server/model").Model} */
export default class RepeatInt32 {
  /** @param {readonly import("@galley/server/model").Request[]} requests */
  async execute(requests) {
    for (const request of requests) {
      const values = request.input("IN").typed();
      const delays = request.input("DELAY").typed();
      const wait = request.input("WAIT").typed()[0] ?? 0;
      const sender = request.responseSender();
      if (delays.length !== values.length) {
        sender.send(
          { error: `expected DELAY to have ${values.length} elements like IN, got ${delays.length}` },
          { final: true },
        );
        continue;
      }
      // Responses go out in the background; execute returns (releasing the instance) after WAIT ms.
      void (async () => {
        for (let i = 0; i < values.length; i++) {
          await sleep(delays[i], request.signal);
          if (request.isCancelled()) break;
          sender.send({
            outputs: [
              { name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(values[i]) },
              { name: "IDX", datatype: "UINT32", shape: [1], data: Uint32Array.of(i) },
            ],
          });
        }
        sender.send(undefined, { final: true });
      })();
      await sleep(wait);
    }
  }
}
