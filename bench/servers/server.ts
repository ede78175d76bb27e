/** A server under test, listening on 127.0.0.1. */
export interface BenchServer {
  /** Ports by protocol: `grpc` (HTTP/2 cleartext) and/or `http` (HTTP/1.1). */
  ports: { grpc?: number; http?: number };
  close(): Promise<void>;
}
