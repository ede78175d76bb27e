/**
 * A typed TypeScript client for Triton-compatible inference servers (Galley and Triton itself),
 * over gRPC, gRPC-Web or Connect.
 *
 * @packageDocumentation
 */

export { createGrpcClient, type GrpcClient, type GrpcClientOptions, type GrpcProtocol } from "./grpc-client.js";
