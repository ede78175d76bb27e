import { pathToFileURL } from "node:url";
import { MODEL, REPOSITORY } from "./lib/simple.js";
const build = process.argv[2] ?? "current";
const g: typeof import("@galley/server") = build === "current" ? await import("@galley/server") : await import(pathToFileURL(`${build}/packages/server/dist/index.js`).href);
const server = g.createServer({ modelRepositories: [REPOSITORY], controlMode: "explicit", loadModels: [MODEL],
  http: { host: "127.0.0.1", port: 0 }, grpc: { host: "127.0.0.1", port: 0 }, metrics: false, log: g.createLogger({ info: false }) });
const { http, grpc } = await server.listen();
console.log(JSON.stringify({ http: http?.port, grpc: grpc?.port, pid: process.pid }));
process.on("SIGUSR2", () => { process.exit(0); });
