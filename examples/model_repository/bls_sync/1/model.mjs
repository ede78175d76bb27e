// bls_sync: forwards INPUT0/INPUT1 to the model named in MODEL_NAME and returns its outputs.
// A failing call (an unknown model, say) fails this request with the callee's message.

/** @implements {import("@galley/server/model").Model} */
export default class BlsSync {
  /**
   * @param {readonly import("@galley/server/model").Request[]} requests
   * @param {import("@galley/server/model").ModelContext} context
   */
  async execute(requests, context) {
    const responses = [];
    for (const request of requests) {
      const model = request.input("MODEL_NAME").strings()[0];
      try {
        const reply = await context.infer({
          model,
          inputs: [request.input("INPUT0"), request.input("INPUT1")],
          outputs: ["OUTPUT0", "OUTPUT1"],
        });
        responses.push({ outputs: reply.outputs });
      } catch (error) {
        responses.push({ error });
      }
    }
    return responses;
  }
}
