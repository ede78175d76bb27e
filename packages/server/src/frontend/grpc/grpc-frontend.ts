// The gRPC frontend as one piece: every RPC of `inference.GRPCInferenceService` and
// `grpc.health.v1` over the core, and which streams skip connect-node (the two RPCs that carry
// tensors, read and written straight on the HTTP/2 stream). The transport (`listenHttp2`) gives it
// each stream; this file decides how each is served.
import type { Http2ServerRequest, Http2ServerResponse, IncomingHttpHeaders, ServerHttp2Stream } from "node:http2";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { GRPCInferenceService, Health } from "@galley/proto";
import type { InferenceServer } from "../../core/inference-server.js";
import { connectResponse } from "./grpc-message.js";
import { createHealthService } from "./health-service.js";
import { createInferenceService, type GrpcFrontendOptions } from "./inference-service.js";
import { isPlainModelStreamInfer, serveModelStreamInfer } from "./stream-infer.js";
import { isPlainModelInfer, serveModelInfer } from "./unary-infer.js";

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
    serveStream(stream, headers) {
      if (isPlainModelInfer(headers)) serveModelInfer(core, options, stream, headers);
      else if (isPlainModelStreamInfer(headers)) serveModelStreamInfer(core, options, stream, headers);
      else return false;
      return true;
    },
    handler(req, res) {
      // connect-node allocates a unary Connect body at its Content-Length (up to readMaxBytes)
      // before a byte of it is read. HTTP/2 and Node's HTTP/1 parser already hold the body to
      // that length; without the hint, connect-node keeps only what has arrived.
      delete req.headers["content-length"];
      connect(req, connectResponse(req, res));
    },
  };
}
