// frame_interpolation: FRAMES [n, 3, H, W] -> VIDEO [FRAME_COUNT, H, W, 3] uint8 by
// motion-compensated blending (interpolate.ts says how).
import type { Model, Request, Response } from "@galley/server/model";
import { interpolateFrames } from "./interpolate.js";

export default class FrameInterpolation implements Model {
  execute(requests: readonly Request[]): Response[] {
    return requests.map((request) => {
      const frames = request.input("FRAMES");
      const count = (request.input("FRAME_COUNT")?.typed()[0] as number | undefined) ?? 0;
      const [n = 0, , h = 0, w = 0] = frames?.shape ?? [];
      if (!frames || n < 1 || count < 1 || count > 256)
        return {
          error: Object.assign(new Error("FRAMES needs a frame and FRAME_COUNT 1 to 256"), { code: "INVALID_ARG" }),
        };
      const video = interpolateFrames(frames.typed() as Float32Array, n, h, w, count);
      return { outputs: [{ name: "VIDEO", datatype: "UINT8", shape: [count, h, w, 3], data: video }] };
    });
  }
}
