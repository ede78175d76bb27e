import type { AddressInfo } from "node:net";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { GRPCInferenceService, Health } from "@galley/proto";
import { InferenceServer } from "./core/inference-server.js";
import { createHealthService } from "./frontend/grpc/health-service.js";
import { createInferenceService } from "./frontend/grpc/inference-service.js";
import { createHttpHandler } from "./frontend/http/http-handler.js";
import { type Listener, listenHttp1, listenHttp2 } from "./frontend/listen.js";

/** Where a frontend listens. Port 0 picks a free port (see {@link GalleyServer.listen}). */
export interface EndpointOptions {
  /** Default `0.0.0.0`. */
  host?: string;
  port: number;
}

/** Options for {@link createServer}. Defaults mirror tritonserver's flags. */
export interface ServerOptions {
  /** Server name in metadata (`--id`). Default `triton`. */
  id?: string;
  /** KServe v2 REST (`--http-port`, default 8000). `false` disables it (`--allow-http=false`). */
  http?: EndpointOptions | false;
  /** gRPC, gRPC-Web and Connect (`--grpc-port`, default 8001). `false` disables it. */
  grpc?: EndpointOptions | false;
  /** How long `close()` waits for in-flight requests (`--exit-timeout-secs`, default 30). */
  exitTimeoutSecs?: number;
}

/** The addresses actually bound, once listening. */
export interface ServerAddresses {
  http?: AddressInfo;
  grpc?: AddressInfo;
}

/** A Galley server: the core plus its network frontends. */
export interface GalleyServer {
  /** The protocol-neutral core the frontends call. */
  readonly core: InferenceServer;
  /** Bind every enabled frontend; resolves with the bound addresses. */
  listen(): Promise<ServerAddresses>;
  /** Stop being ready, drain in-flight requests (up to the exit timeout), close the listeners. */
  close(): Promise<void>;
}

/**
 * Create a Galley server.
 *
 * @example
 * const server = createServer({ http: { host: "127.0.0.1", port: 0 }, grpc: false });
 * const { http } = await server.listen();
 * const res = await fetch(`http://127.0.0.1:${http?.port}/v2/health/ready`); // 200
 * await server.close();
 */
export function createServer(options: ServerOptions = {}): GalleyServer {
  const core = new InferenceServer({ id: options.id ?? "triton" });
  const http = options.http === undefined ? { port: 8000 } : options.http;
  const grpc = options.grpc === undefined ? { port: 8001 } : options.grpc;
  const graceMs = (options.exitTimeoutSecs ?? 30) * 1000;
  const listeners: Listener[] = [];

  return {
    core,
    async listen() {
      const addresses: ServerAddresses = {};
      if (http) {
        const listener = await listenHttp1(createHttpHandler(core), http.host ?? "0.0.0.0", http.port);
        listeners.push(listener);
        addresses.http = listener.address;
      }
      if (grpc) {
        const handler = connectNodeAdapter({
          routes: (router) => {
            router.service(GRPCInferenceService, createInferenceService(core));
            router.service(Health, createHealthService(core));
          },
        });
        const listener = await listenHttp2(handler, grpc.host ?? "0.0.0.0", grpc.port);
        listeners.push(listener);
        addresses.grpc = listener.address;
      }
      return addresses;
    },
    async close() {
      core.beginShutdown();
      await Promise.all(listeners.splice(0).map((l) => l.close(graceMs)));
      core.stop();
    },
  };
}
