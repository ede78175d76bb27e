// Child entry: Galley over the model repository in argv[2] (HTTP only), loading the models named in
// argv[3..]. Reports its HTTP port; its only job answers this process's CPU time (µs, all threads).
// With BENCH_GALLEY_BUILD=<checkout> in its environment, Galley comes from that checkout's built
// server package (an earlier commit's worktree, for a before/after in one run).
import { pathToFileURL } from "node:url";
import { serveJobs } from "./ipc.js";

type ServerModule = typeof import("@galley/server");
const build = process.env.BENCH_GALLEY_BUILD;
const { createLogger, createServer }: ServerModule = build
  ? ((await import(pathToFileURL(`${build}/packages/server/dist/index.js`).href)) as ServerModule)
  : await import("@galley/server");
const [repository, ...models] = process.argv.slice(2);
if (!repository || models.length === 0) throw new Error("usage: galley-repo-process <repository> <model>...");
const server = createServer({
  modelRepositories: [repository],
  controlMode: "explicit",
  loadModels: models,
  http: { host: "127.0.0.1", port: 0 },
  grpc: false,
  metrics: false,
  log: createLogger({ info: false }),
});
const { http, failedModels } = await server.listen();
if (failedModels.length > 0) throw new Error(`galley failed to load ${failedModels.join(", ")}`);
const cpu = () => {
  const { user, system } = process.cpuUsage();
  return user + system;
};
serveJobs({ http: http?.port }, async () => cpu(), server.close);
