import type { ServiceImpl } from "@connectrpc/connect";
import { type Health, HealthCheckResponse_ServingStatus } from "@galley/proto";
import type { InferenceServer } from "../../core/inference-server.js";

/** `grpc.health.v1.Health/Check`, as Triton serves it: the service name is ignored, and the
 * status is the server's readiness. There is no Watch. */
export function createHealthService(server: InferenceServer): ServiceImpl<typeof Health> {
  return {
    check: () => ({
      status: server.isReady()
        ? HealthCheckResponse_ServingStatus.SERVING
        : HealthCheckResponse_ServingStatus.NOT_SERVING,
    }),
  };
}
