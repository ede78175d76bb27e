// square_int32 (Triton's `square` backend, as a scripted model): decoupled; IN = [n] gives n
// responses of OUT = [n], then a flag-only final response.

/** @implements {import("@galley/server/model").Model} */
export default class SquareInt32 {
  /** @param {readonly import("@galley/server/model").Request[]} requests */
  execute(requests) {
    for (const request of requests) {
      const n = request.input("IN").typed()[0];
      const sender = request.responseSender();
      if (n < 0) {
        sender.send(
          { error: Object.assign(new Error(`IN must be >= 0, got ${n}`), { code: "INVALID_ARG" }) },
          { final: true },
        );
        continue;
      }
      for (let i = 0; i < n && !request.isCancelled(); i++) {
        sender.send({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(n) }] });
      }
      sender.send(undefined, { final: true });
    }
  }
}
