// The gRPC frontend as one piece: every RPC of `inference.GRPCInferenceService` and
// `grpc.health.v1` over the core through connect-node, and the lean calls (`lean-calls.ts`: the two
// RPCs that carry tensors, read and written straight on the HTTP/2 stream, which decide which
// streams are theirs). The transport (`listenHttp2`) gives it each stream.
import type { Http2ServerRequest, Http2ServerResponse, IncomingHttpHeaders, ServerHttp2Stream } from "node:http2";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { GRPCInferenceService, Health } from "@galley/proto";
import type { InferenceServer } from "../../core/inference-server.js";
import { connectResponse } from "./grpc-message.js";
import type { GrpcFrontendOptions } from "./grpc-options.js";
import { createHealthService } from "./health-service.js";
import { createInferenceService } from "./inference-service.js";
import { createLeanCalls } from "./lean-calls.js";

/** What `listenHttp2` takes: the lean handlers' choice of streams, and connect-node for the rest. */
export interface GrpcFrontend {
  /** Serves a plain ModelInfer or ModelStreamInfer stream itself (true), or leaves it (false). */
  serveStream(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): boolean;
  /** Every other RPC, and gRPC-Web and Connect, through connect-node. */
  handler(req: Http2ServerRequest, res: Http2ServerResponse): void;
}

/** The gRPC frontend over `core`. */
export function createGrpcFrontend(core: InferenceServer, options: GrpcFrontendOptions): GrpcFrontend {
  const connect = connectNodeAdapter({
    // Triton allows messages up to INT32_MAX bytes.
    readMaxBytes: 0x7fffffff,
    writeMaxBytes: 0x7fffffff,
    routes: (router) => {
      router.service(GRPCInferenceService, createInferenceService(core, options));
      router.service(Health, createHealthService(core));
    },
  });
  return {
    serveStream: createLeanCalls(core, options),
    handler(req, res) {
      // connect-node allocates a unary Connect body at its Content-Length (up to readMaxBytes)
      // before a byte of it is read. HTTP/2 and Node's HTTP/1 parser already hold the body to
      // that length; without the hint, connect-node keeps only what has arrived.
      delete req.headers["content-length"];
      connect(req, connectResponse(req, res));
    },
  };
}
