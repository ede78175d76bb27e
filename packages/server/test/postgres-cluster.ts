// A throwaway PostgreSQL cluster for tests: Debian's server binaries (/usr/lib/postgresql/<v>/bin,
// or $PG_BIN), initdb'd in a temporary folder, listening on a unix socket there only (no TCP port
// to collide on). As root, the server runs as the `postgres` user (initdb refuses root).
import { execFileSync, spawn } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface PostgresCluster {
  /** A connection URL for the `postgres` database (user `galley`, trust authentication). */
  url: string;
  /** The server's process id (its backends are its children). */
  pid: number;
  stop(): Promise<void>;
}

/** The folder of PostgreSQL's server binaries ($PG_BIN, else Debian's newest with initdb), or undefined. */
export function findPostgresBin(): string | undefined {
  if (process.env.PG_BIN) return process.env.PG_BIN;
  const root = "/usr/lib/postgresql";
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter((v) => /^\d+$/.test(v))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  return versions.map((v) => join(root, v, "bin")).find((dir) => existsSync(join(dir, "initdb")));
}

function binDir(): string {
  const found = findPostgresBin();
  if (!found)
    throw new Error("PostgreSQL's server binaries were not found: install Debian's postgresql, or set PG_BIN");
  return found;
}

/** Start a cluster; resolves once it accepts connections. */
export async function startPostgres(): Promise<PostgresCluster> {
  const bin = binDir();
  const dir = mkdtempSync(join(tmpdir(), "galley-pg-"));
  const user =
    process.getuid?.() === 0
      ? {
          uid: Number(execFileSync("id", ["-u", "postgres"]).toString().trim()),
          gid: Number(execFileSync("id", ["-g", "postgres"]).toString().trim()),
        }
      : undefined;
  if (user) chownSync(dir, user.uid, user.gid);
  const data = join(dir, "data");
  execFileSync(join(bin, "initdb"), ["-D", data, "-A", "trust", "-U", "galley", "-E", "UTF8", "--no-sync"], {
    stdio: "ignore",
    ...(user ?? {}),
  });
  const server = spawn(
    join(bin, "postgres"),
    ["-D", data, "-k", dir, "-c", "listen_addresses=", "-c", "fsync=off", "-c", "max_connections=50"],
    { stdio: ["ignore", "ignore", "pipe"], ...(user ?? {}) },
  );
  const exited = new Promise<void>((resolve) => server.once("exit", () => resolve()));
  await new Promise<void>((resolve, reject) => {
    let log = "";
    const onData = (chunk: Buffer) => {
      log += chunk.toString();
      if (log.includes("database system is ready to accept connections")) {
        server.stderr.off("data", onData);
        server.stderr.resume();
        resolve();
      }
    };
    server.stderr.on("data", onData);
    server.once("exit", (code) => reject(new Error(`postgres exited (${code}) before it was ready: ${log}`)));
  });
  return {
    url: `postgresql://galley@/postgres?host=${encodeURIComponent(dir)}`,
    pid: server.pid as number,
    async stop() {
      server.kill("SIGINT");
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
