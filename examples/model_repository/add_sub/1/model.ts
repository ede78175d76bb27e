// add_sub, the Python backend's first example, in TypeScript (transpiled when the model loads).
import type { InitializeArgs, Model, ModelContext, Request, Response } from "@galley/server/model";

export default class AddSub implements Model {
  private name = "";

  initialize(args: InitializeArgs, context: ModelContext): void {
    this.name = args.model_instance_name;
    context.log.verbose(`${this.name} initialized`);
  }

  execute(requests: readonly Request[]): Response[] {
    return requests.map((request) => {
      const a = request.input("INPUT0")?.typed() as Float32Array;
      const b = request.input("INPUT1")?.typed() as Float32Array;
      const sum = a.map((x, i) => x + (b[i] ?? 0));
      const difference = a.map((x, i) => x - (b[i] ?? 0));
      return {
        outputs: [
          { name: "OUTPUT0", datatype: "FP32", shape: [4], data: sum },
          { name: "OUTPUT1", datatype: "FP32", shape: [4], data: difference },
        ],
      };
    });
  }
}
