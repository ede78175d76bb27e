import type { ServiceImpl } from "@connectrpc/connect";
import type { GRPCInferenceService } from "@galley/proto";
import type { InferenceServer } from "../../core/inference-server.js";

/**
 * `inference.GRPCInferenceService` over one {@link InferenceServer}. RPCs not listed here are
 * answered UNIMPLEMENTED by Connect until their issue lands.
 */
export function createInferenceService(server: InferenceServer): Partial<ServiceImpl<typeof GRPCInferenceService>> {
  return {
    serverLive: () => ({ live: server.isLive() }),
    serverReady: () => ({ ready: server.isReady() }),
    serverMetadata: () => server.metadata(),
  };
}
