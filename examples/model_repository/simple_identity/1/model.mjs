// simple_identity: OUTPUT0 = INPUT0. The input's bytes (4-byte-length-prefixed BYTES elements)
// are handed back as they arrived, so every element round-trips exactly, NUL bytes included.

/** @implements {import("@galley/server/model").Model} */
export default class SimpleIdentity {
  /** @param {readonly import("@galley/server/model").Request[]} requests */
  execute(requests) {
    return requests.map((request) => {
      const input = request.input("INPUT0");
      return { outputs: [{ name: "OUTPUT0", datatype: "BYTES", shape: input.shape, data: input.data }] };
    });
  }
}
