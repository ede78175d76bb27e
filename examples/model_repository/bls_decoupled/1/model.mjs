// bls_decoupled: relays square_int32's stream, numbering its responses. Cancelling this request
// cancels the BLS call too (the call belongs to the batch that made it).

/** @implements {import("@galley/server/model").Model} */
export default class BlsDecoupled {
  /**
   * @param {readonly import("@galley/server/model").Request[]} requests
   * @param {import("@galley/server/model").ModelContext} context
   */
  execute(requests, context) {
    for (const request of requests) {
      const sender = request.responseSender();
      void (async () => {
        try {
          let i = 0;
          for await (const reply of context.stream({ model: "square_int32", inputs: [request.input("IN")] })) {
            const n = reply.output("OUT").typed()[0];
            sender.send({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(n * 10 + i) }] });
            i++;
          }
          sender.send(undefined, { final: true });
        } catch (error) {
          sender.send({ error }, { final: true });
        }
      })();
    }
  }
}
