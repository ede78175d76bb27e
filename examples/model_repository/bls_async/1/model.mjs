// bls_async: the same computation as bls_sync, as two BLS calls in flight at once (one per
// output), awaited together.

/** @implements {import("@galley/server/model").Model} */
export default class BlsAsync {
  /**
   * @param {readonly import("@galley/server/model").Request[]} requests
   * @param {import("@galley/server/model").ModelContext} context
   */
  execute(requests, context) {
    return Promise.all(
      requests.map(async (request) => {
        const model = request.input("MODEL_NAME").strings()[0];
        const inputs = [request.input("INPUT0"), request.input("INPUT1")];
        try {
          const [sum, difference] = await Promise.all([
            context.infer({ model, inputs, outputs: ["OUTPUT0"] }),
            context.infer({ model, inputs, outputs: ["OUTPUT1"] }),
          ]);
          return { outputs: [sum.output("OUTPUT0"), difference.output("OUTPUT1")] };
        } catch (error) {
          return { error };
        }
      }),
    );
  }
}
