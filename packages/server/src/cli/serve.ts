import { stat } from "node:fs/promises";
import { createLogger } from "../log.js";
import { createServer } from "../server.js";
import { parseServeArgs, SERVE_USAGE, UsageError } from "./serve-options.js";

/**
 * `galley serve`: start the server, log where each frontend listens (in Triton's words, so
 * scripts that wait for "Started GRPCInferenceService" keep working), and on SIGTERM/SIGINT drain
 * and exit 0. Returns the exit code for usage errors; otherwise runs until a signal.
 */
export async function serve(args: string[]): Promise<number> {
  let options: ReturnType<typeof parseServeArgs>;
  try {
    options = parseServeArgs(args);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`error: ${error.message}\n\n${SERVE_USAGE}`);
    return 1;
  }
  if (options === "help") {
    process.stdout.write(SERVE_USAGE);
    return 0;
  }
  const log = createLogger({ verboseLevel: options.logVerbose, format: options.logFormat });
  for (const repository of options.modelRepositories) {
    const info = await stat(repository).catch(() => undefined);
    if (!info?.isDirectory()) {
      log.error(`failed to stat model repository path '${repository}': not a directory`);
      return 1;
    }
  }

  const server = createServer(options.server);
  const addresses = await server.listen();
  if (addresses.grpc) log.info(`Started GRPCInferenceService at ${format(addresses.grpc)}`);
  if (addresses.http) log.info(`Started HTTPService at ${format(addresses.http)}`);

  return new Promise((resolve) => {
    const stop = (signal: string) => {
      log.info(`Received ${signal}: draining in-flight requests, then exiting`);
      server.close().then(
        () => {
          log.info("Server stopped");
          resolve(0);
        },
        (error: unknown) => {
          log.error(`shutdown failed: ${String(error)}`);
          resolve(1);
        },
      );
    };
    process.once("SIGTERM", () => stop("SIGTERM"));
    process.once("SIGINT", () => stop("SIGINT"));
  });
}

function format(address: { address: string; port: number; family: string }): string {
  return address.family === "IPv6" ? `[${address.address}]:${address.port}` : `${address.address}:${address.port}`;
}
