// The embedded store: Node's built-in SQLite (`node:sqlite`, Node 22.13 and later). Statements are
// synchronous, on the event loop, and take microseconds on this small table. WAL mode with
// synchronous NORMAL keeps every committed row through a crash of the process (SIGKILL): the WAL
// is in the kernel's page cache the moment a commit returns. It is fsynced at checkpoints, not at
// each commit: FULL cost ~180 µs a commit here (7 ms at worst), several commits a job, all of it
// on the event loop; what NORMAL gives up is the last commits before a power loss or a kernel
// crash (the videos guide says so; PostgreSQL's commits are durable, and fsync in its own process).
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import type { Row, SqlDriver, SqlValue } from "./sql-driver.js";

interface Statement {
  all(...params: SqlValue[]): Row[];
}
interface Database {
  exec(sql: string): void;
  prepare(sql: string): Statement;
  close(): void;
}

// Named through a constant: Node 20's type declarations have no node:sqlite.
const SQLITE: string = "node:sqlite";

/**
 * Open (creating if needed) the SQLite database at `path`.
 * @throws an Error that says which Node version is needed where `node:sqlite` is missing.
 */
export async function openSqlite(path: string): Promise<SqlDriver> {
  let DatabaseSync: new (path: string) => Database;
  try {
    ({ DatabaseSync } = (await import(SQLITE)) as unknown as { DatabaseSync: new (path: string) => Database });
  } catch {
    throw new Error(
      `the jobs store needs Node's built-in SQLite (node:sqlite, Node 22.13 or later); this is Node ${process.versions.node}. Use a newer Node or --jobs-store postgres://...`,
    );
  }
  mkdirSync(dirname(path), { recursive: true });
  const db = new DatabaseSync(path);
  db.exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000;");
  const statements = new Map<string, Statement>();
  const query = async (sql: string, params: readonly SqlValue[] = []): Promise<Row[]> => {
    let statement = statements.get(sql);
    if (!statement) {
      statement = db.prepare(sql.replace(/\$(\d+)/g, "?$1"));
      statements.set(sql, statement);
    }
    return statement.all(...params).map((row) => ({ ...row }));
  };
  // Statements run synchronously, so nothing else runs inside a transaction but its own awaits
  // on already-settled promises; a second transaction waits for the first all the same.
  let last: Promise<unknown> = Promise.resolve();
  return {
    dialect: "sqlite",
    query,
    transaction<T>(work: (q: typeof query) => Promise<T>): Promise<T> {
      const run = last.then(async () => {
        db.exec("BEGIN IMMEDIATE");
        try {
          const result = await work(query);
          db.exec("COMMIT");
          return result;
        } catch (error) {
          db.exec("ROLLBACK");
          throw error;
        }
      });
      last = run.catch(() => undefined);
      return run;
    },
    async close() {
      await last;
      db.close();
    },
  };
}
