import { type Client, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import {
  GRPCInferenceService,
  Health,
  HealthCheckResponse_ServingStatus,
  type ServerMetadataResponse,
} from "@galley/proto";

/** The wire protocols a Galley (or Triton) gRPC port can speak. Triton itself speaks only `grpc`. */
export type GrpcProtocol = "grpc" | "connect" | "grpc-web";

/** Options for {@link createGrpcClient}. */
export interface GrpcClientOptions {
  /** The server's gRPC origin, e.g. `http://localhost:8001`. */
  baseUrl: string;
  /** Default `grpc`, which works against Triton and Galley alike. */
  protocol?: GrpcProtocol;
}

/** A client for `inference.GRPCInferenceService` and `grpc.health.v1.Health`. */
export interface GrpcClient {
  /** Every RPC of `inference.GRPCInferenceService`, with the generated message types. */
  readonly service: Client<typeof GRPCInferenceService>;
  /** `grpc.health.v1.Health`: `Check` reports server readiness. */
  readonly health: Client<typeof Health>;
  /** ServerLive. */
  isServerLive(): Promise<boolean>;
  /** ServerReady. */
  isServerReady(): Promise<boolean>;
  /** ServerMetadata: name, version and extensions. */
  serverMetadata(): Promise<ServerMetadataResponse>;
  /** grpc.health.v1 Check: true when the server reports SERVING. */
  isServing(): Promise<boolean>;
}

/**
 * Create a gRPC client over HTTP/2.
 *
 * @example
 * const client = createGrpcClient({ baseUrl: "http://localhost:8001" });
 * if (await client.isServerReady()) console.log((await client.serverMetadata()).name);
 */
export function createGrpcClient(options: GrpcClientOptions): GrpcClient {
  const transport = createTransport(options);
  const service = createClient(GRPCInferenceService, transport);
  const health = createClient(Health, transport);
  return {
    service,
    health,
    isServerLive: async () => (await service.serverLive({})).live,
    isServerReady: async () => (await service.serverReady({})).ready,
    serverMetadata: () => service.serverMetadata({}),
    isServing: async () => (await health.check({})).status === HealthCheckResponse_ServingStatus.SERVING,
  };
}

function createTransport({ baseUrl, protocol = "grpc" }: GrpcClientOptions): Transport {
  switch (protocol) {
    case "grpc":
      return createGrpcTransport({ baseUrl });
    case "connect":
      return createConnectTransport({ baseUrl, httpVersion: "2" });
    case "grpc-web":
      return createGrpcWebTransport({ baseUrl, httpVersion: "2" });
    default:
      throw new TypeError(`unknown protocol '${String(protocol)}': expected grpc, connect or grpc-web`);
  }
}
