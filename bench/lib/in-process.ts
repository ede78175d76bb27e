// A Galley server inside the benchmark's own process, with no ports and no log: for benchmarks
// that call `core.infer` directly, so that what they measure is the core and the backends.
import { createServer, type GalleyServer } from "@galley/server";

const quiet = { info() {}, warn() {}, error() {}, verbose() {} } as never;

/** Serves `repository` in this process; throws, naming them, when models fail to load. */
export async function startInProcess(
  repository: string,
  options: { pythonExecutable?: string } = {},
): Promise<GalleyServer> {
  const python = options.pythonExecutable;
  const server = createServer({
    modelRepositories: [repository],
    http: false,
    grpc: false,
    metrics: false,
    log: quiet,
    ...(python ? { pythonExecutable: python } : {}),
  });
  const { failedModels } = await server.listen();
  if (failedModels.length > 0) {
    await server.close();
    throw new Error(`models failed to load: ${failedModels.join(", ")}${python ? ` (python: ${python})` : ""}`);
  }
  return server;
}
