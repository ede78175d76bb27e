// Galley from a build, serving `simple`: the server package of this checkout (`current`) or of
// another checkout with packages/server built, so that two builds can be measured in one run.
import { pathToFileURL } from "node:url";
import { MODEL, REPOSITORY } from "./simple.js";

export type ServerModule = typeof import("@galley/server");

/** The @galley/server module of `build`: `current` for this checkout's, else a checkout's path. */
export async function importGalley(build: string): Promise<ServerModule> {
  return build === "current"
    ? await import("@galley/server")
    : ((await import(pathToFileURL(`${build}/packages/server/dist/index.js`).href)) as ServerModule);
}

/** A server of `galley` with only `simple` loaded, REST and gRPC on loopback free ports, quiet. */
export function simpleServer(galley: ServerModule): ReturnType<ServerModule["createServer"]> {
  return galley.createServer({
    modelRepositories: [REPOSITORY],
    controlMode: "explicit",
    loadModels: [MODEL],
    http: { host: "127.0.0.1", port: 0 },
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: galley.createLogger({ info: false }),
  });
}
