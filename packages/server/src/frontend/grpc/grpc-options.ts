/** gRPC frontend options (tritonserver's `--grpc-*` flags). */
export interface GrpcFrontendOptions {
  /** `--grpc-restricted-protocol=<protocols>:<key>=<value>`: header `triton-grpc-protocol-<key>` required. */
  restricted?: readonly { protocols: readonly string[]; key: string; value: string }[];
  /** `--grpc-keepalive-time` in ms: ping idle connections this often (default 7,200,000). */
  keepaliveTimeMs?: number;
  /** `--grpc-keepalive-timeout` in ms: close a connection whose ping is not answered (default 20,000). */
  keepaliveTimeoutMs?: number;
  /**
   * `--grpc-idle-timeout-secs` in ms: close a connection that has had no open stream this long
   * (default 300,000; 0: never). A stream that stays open, however quiet, keeps its connection.
   */
  idleTimeoutMs?: number;
  /**
   * Close a connection that opens no stream this long after connecting (default 10,000, or the
   * idle limit when shorter; no flag).
   */
  firstStreamTimeoutMs?: number;
  /**
   * `--grpc-max-connections`: calls on a connection past this many are answered UNAVAILABLE and
   * the connection closed (0: no limit; default: half the descriptor limit less 256).
   */
  maxConnections?: number;
}
