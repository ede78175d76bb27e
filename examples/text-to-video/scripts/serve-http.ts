// Serves some models of a repository over KServe v2 HTTP until SIGTERM, for a benchmark driver in
// another language: scripts/real-benchmark.py starts it for baseline (iii) (text_to_video_python).
// Prints {"port": N} on stdout once the models are loaded; exits 1 when one fails to load.
//   npx tsx scripts/serve-http.ts --models=<repo> --load=text_to_video_python [--config=gpu] [--port=0]
//     [--python=<the stubs' interpreter, one with torch>]
// On the GPU machine it runs as prepare-carry.sh's bundle (node <carry>/t2v-serve-http.mjs).
import { createLogger, createServer } from "@galley/server";

const arg = (name: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const models = arg("models");
if (!models) throw new Error("--models=<repository> is required");
const config = arg("config");
const python = arg("python");
const server = createServer({
  modelRepositories: [models],
  ...(config ? { modelConfigName: config } : {}),
  ...(python ? { pythonExecutable: python } : {}),
  controlMode: "explicit",
  loadModels: (arg("load") ?? "text_to_video_python").split(","),
  http: { host: "127.0.0.1", port: Number(arg("port") ?? 0) },
  grpc: false,
  metrics: false,
  log: createLogger(),
});
const { http, failedModels } = await server.listen();
if (failedModels.length > 0) {
  console.error(`models that did not load: ${failedModels.join(", ")}`);
  await server.close();
  process.exit(1);
}
console.log(JSON.stringify({ port: http?.port }));
process.on("SIGTERM", () => {
  void server.close().then(() => process.exit(0));
});
