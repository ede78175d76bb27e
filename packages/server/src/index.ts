/**
 * Galley's reference server: a Triton-compatible inference server for Node.js. It speaks the
 * KServe v2 REST protocol (with Triton's extensions) and `inference.GRPCInferenceService`, so
 * Triton's clients, tools and dashboards work against it unchanged.
 *
 * @packageDocumentation
 */

export {
  GALLEY_VERSION,
  type InferenceServer,
  type InferenceServerOptions,
  type ServerMetadata,
} from "./core/inference-server.js";
export { createLogger, type Logger, type LoggerOptions } from "./log.js";
export {
  createServer,
  type EndpointOptions,
  type GalleyServer,
  type ServerAddresses,
  type ServerOptions,
} from "./server.js";
