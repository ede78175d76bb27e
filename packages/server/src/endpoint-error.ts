import { createServer, type Server } from "node:net";

/** A network frontend of the server. */
export type Endpoint = "grpc" | "http" | "metrics";

/** Triton's name for each in its start-up errors (`failed to start GRPC service: ...`). */
const SERVICE: Record<Endpoint, string> = { grpc: "GRPC", http: "HTTP", metrics: "Metrics" };

/**
 * A frontend that could not listen: its port is taken, the port needs privileges, or the address
 * is not one of this machine's. The message is Triton's line for it (tritonserver's `main.cc` and
 * `http_server.cc`/`grpc_server.cc`: `failed to start HTTP service: Unavailable - Socket
 * '0.0.0.0:8000' already in use`); `endpoint`, `host`, `port` and `code` (Node's: `EADDRINUSE`,
 * `EACCES`, `EADDRNOTAVAIL`, `ENOTFOUND`...) let a caller say which setting to change.
 */
export class EndpointError extends Error {
  readonly endpoint: Endpoint;
  readonly host: string;
  readonly port: number;
  readonly code: string;

  constructor(endpoint: Endpoint, host: string, port: number, cause: NodeJS.ErrnoException) {
    const code = cause.code ?? "UNKNOWN";
    super(`failed to start ${SERVICE[endpoint]} service: Unavailable - ${socketProblem(host, port, code, cause)}`, {
      cause,
    });
    this.name = "EndpointError";
    this.endpoint = endpoint;
    this.host = host;
    this.port = port;
    this.code = code;
  }

  /** Whether the address (`--*-address`) is at fault, rather than the port. */
  get addressProblem(): boolean {
    return this.code === "EADDRNOTAVAIL" || this.code === "ENOTFOUND" || this.code === "EAI_AGAIN";
  }
}

function socketProblem(host: string, port: number, code: string, cause: Error): string {
  const socket = `Socket '${host}:${port}'`;
  switch (code) {
    case "EADDRINUSE":
      return `${socket} already in use`;
    case "EACCES":
      return `${socket}: permission denied (ports below 1024 need privileges)`;
    case "EADDRNOTAVAIL":
      return `${socket}: '${host}' is not an address of this machine`;
    case "ENOTFOUND":
    case "EAI_AGAIN":
      return `${socket}: unknown host '${host}'`;
    default:
      return `${socket}: ${cause.message}`;
  }
}

/** Where one frontend will listen. */
export interface EndpointAddress {
  endpoint: Endpoint;
  host: string;
  port: number;
}

/**
 * Check that every endpoint can listen, before the models load (a taken port should not cost a
 * minute of loading first): bind each in turn, holding the ones bound (so that two of them on one port
 * collide, as they would later), then close them all. Rejects with the first {@link EndpointError}, in
 * Triton's order (gRPC, HTTP, metrics). The ports are free again when this resolves: nothing
 * answers while the models load (connections are refused, as by Triton); another process that
 * takes a port in between still fails the later bind, with the same error.
 */
export async function checkEndpoints(endpoints: readonly EndpointAddress[]): Promise<void> {
  const bound: Server[] = [];
  try {
    for (const { endpoint, host, port } of endpoints) {
      const server = createServer();
      await new Promise<void>((resolve, reject) => {
        server.once("error", (error: NodeJS.ErrnoException) => reject(new EndpointError(endpoint, host, port, error)));
        server.listen({ host, port }, resolve);
      });
      bound.push(server);
    }
  } finally {
    await Promise.all(bound.map((server) => new Promise((resolve) => server.close(resolve))));
  }
}
