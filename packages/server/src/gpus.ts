import { probeCuda } from "@galley/backends-native";
import type { Logger } from "./base/log.js";

/**
 * The GPU ids this process can use, found once: CUDA's devices (the driver loaded at run time by
 * the native addon), or none where there is no driver, no device or no addon. Logged once.
 */
export function gpuFinder(log: Logger): () => Promise<readonly number[]> {
  let found: Promise<readonly number[]> | undefined;
  return () => {
    found ??= (async () => {
      try {
        const cuda = await probeCuda();
        if (cuda.available) {
          log.info(`CUDA driver ${cuda.driverVersion}: ${cuda.deviceCount} GPU(s)`);
          return Array.from({ length: cuda.deviceCount }, (_, i) => i);
        }
        log.verbose(1, `no usable GPU: ${cuda.error}`);
      } catch (error) {
        log.verbose(1, `no usable GPU: ${(error as Error).message.split("\n")[0]}`);
      }
      return [];
    })();
    return found;
  };
}
