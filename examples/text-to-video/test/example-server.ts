// The server most of this example's tests run against: models/ on gRPC (port 0), quiet, with
// whatever else a test's options add (a trace configuration, say).
import { fileURLToPath } from "node:url";
import { createGrpcClient, type GrpcClient } from "@galley/client";
import { createLogger, createServer, type GalleyServer, type ServerOptions } from "@galley/server";

export interface ExampleServer {
  server: GalleyServer;
  /** `http://127.0.0.1:<port>`, the gRPC address as clients take it. */
  url: string;
  client: GrpcClient;
}

/** A server over models/ with gRPC on port 0, no HTTP, no metrics, no log. */
export async function startExampleServer(options: ServerOptions = {}): Promise<ExampleServer> {
  const server = createServer({
    modelRepositories: [fileURLToPath(new URL("../models", import.meta.url))],
    http: false,
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: createLogger({ write: () => {} }),
    ...options,
  });
  const { grpc } = await server.listen();
  const url = `http://127.0.0.1:${grpc?.port}`;
  return { server, url, client: createGrpcClient({ baseUrl: url }) };
}
