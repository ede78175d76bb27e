import { createLogger } from "../base/log.js";
import { EndpointError } from "../endpoint-error.js";
import { openRepository } from "../repository/open-repository.js";
import { createServer } from "../server.js";
import { parseServeArgs, SERVE_USAGE, UsageError } from "./serve-options.js";

/**
 * `galley serve`: start the server, log where each frontend listens (in Triton's words, so
 * scripts that wait for "Started GRPCInferenceService" keep working), load the models, and on
 * SIGTERM/SIGINT stop accepting, answer everything accepted, and exit 0.
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
  let log: ReturnType<typeof createLogger>;
  try {
    log = createLogger({
      verboseLevel: options.logVerbose,
      format: options.logFormat,
      info: options.logInfo,
      warning: options.logWarning,
      error: options.logError,
      ...(options.logFile ? { file: options.logFile } : {}),
    });
  } catch (error) {
    process.stderr.write(`error: failed to open log file '${options.logFile}': ${(error as Error).message}\n`);
    return 1;
  }
  for (const warning of options.warnings) log.warn(warning);
  for (const repository of options.server.modelRepositories ?? []) {
    try {
      await openRepository(repository).check();
    } catch (error) {
      log.error((error as Error).message);
      return 1;
    }
  }

  const server = createServer({ ...options.server, exitOnError: options.exitOnError, log });
  const graceMs = (options.server.exitTimeoutSecs ?? 30) * 1000;
  let stopping: Promise<number> | undefined;
  const stop = (signal: string) => {
    stopping ??= (async () => {
      log.info(`Received ${signal}: no new requests; answering those accepted, then exiting`);
      // Whatever is still running when the exit timeout ends (a model that never returns, a load
      // that never finishes) must not keep the process: the timer does not hold the loop itself.
      setTimeout(() => {
        log.error(`exit timeout of ${graceMs / 1000} s expired with work still in flight: exiting now`);
        process.exit(1);
      }, graceMs).unref();
      try {
        await server.close();
        log.info("Server stopped");
        return 0;
      } catch (error) {
        log.error(`shutdown failed: ${String(error)}`);
        return 1;
      }
    })();
    return stopping;
  };
  const signalled = new Promise<number>((resolve) => {
    process.once("SIGTERM", () => resolve(stop("SIGTERM")));
    process.once("SIGINT", () => resolve(stop("SIGINT")));
  });

  let started: Awaited<ReturnType<typeof server.listen>>;
  try {
    started = await server.listen();
  } catch (error) {
    if (!(error instanceof EndpointError)) throw error;
    if (stopping) return stopping;
    // One line, as Triton's, and the flag that changes what failed; no stack.
    log.error(`${error.message}; ${endpointHint(error)}`);
    await server.close();
    return 1;
  }
  // A signal during startup: the server stopped part-way; report that, not a start.
  if (stopping) return stopping;
  if (started.failedModels.length > 0) {
    log.error(`failed to load model(s): ${started.failedModels.join(", ")}`);
    if (options.exitOnError) {
      log.error("exiting: a model failed to load and --exit-on-error is true");
      await stop("--exit-on-error");
      return 1;
    }
  }
  if (started.grpc) log.info(`Started GRPCInferenceService at ${format(started.grpc)}`);
  if (started.http) log.info(`Started HTTPService at ${format(started.http)}`);
  if (started.http && options.server.jobs?.page)
    log.info(`The videos page: http://localhost:${started.http.port}/videos`);
  if (started.metrics) log.info(`Started Metrics Service at ${format(started.metrics)}`);
  const ready = (await server.core.repositoryIndex(true)).map((e) => e.name);
  if (started.http && ready.length > 0) {
    const model = ready.includes("simple") ? "simple" : (ready[0] as string);
    log.info(
      `Ready: ${ready.length} model(s) loaded. Try: curl localhost:${started.http.port}/v2/models/${model} ` +
        `(metadata), or see docs/guides/quick-start.md for a first inference`,
    );
  }
  return signalled;
}

/** The `galley serve` flag that changes what `error` could not bind. */
function endpointHint(error: EndpointError): string {
  return error.addressProblem
    ? `choose another address with --${error.endpoint}-address`
    : `choose another port with --${error.endpoint}-port (0 picks a free one)`;
}

function format(address: { address: string; port: number; family: string }): string {
  return address.family === "IPv6" ? `[${address.address}]:${address.port}` : `${address.address}:${address.port}`;
}
