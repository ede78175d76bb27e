import type { AddressInfo, Server } from "node:net";

/** One bound listener. */
export interface Listener {
  readonly address: AddressInfo;
  /** Stop accepting, let in-flight requests finish for up to `graceMs`, then cut what is left. */
  close(graceMs: number): Promise<void>;
}

/** Listen on `host:port`; rejects with the bind error (port taken, address not available). */
export function bind(server: Server, host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
}
