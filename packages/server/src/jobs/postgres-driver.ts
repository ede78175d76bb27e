// The shared store: PostgreSQL through `pg`'s pool, so that several replicas serve one queue.
import pg from "pg";
import type { Row, SqlDriver, SqlValue } from "./sql-driver.js";

/** The most connections one server holds to PostgreSQL. */
export const POSTGRES_POOL_SIZE = 4;

/** Connect to the PostgreSQL database at `url` (`postgres://user@host:port/db`), checking it answers. */
export async function openPostgres(url: string): Promise<SqlDriver> {
  const pool = new pg.Pool({ connectionString: url, max: POSTGRES_POOL_SIZE, connectionTimeoutMillis: 10_000 });
  // An idle connection that breaks (the database restarts) is dropped from the pool, not thrown.
  pool.on("error", () => undefined);
  await pool.query("SELECT 1");
  const query = async (sql: string, params: readonly SqlValue[] = []): Promise<Row[]> =>
    (await pool.query(sql, params as SqlValue[])).rows as Row[];
  return {
    dialect: "postgres",
    query,
    async transaction<T>(work: (q: typeof query) => Promise<T>): Promise<T> {
      const client = await pool.connect();
      try {
        await client.query("BEGIN");
        const result = await work(async (sql, params = []) => (await client.query(sql, params as SqlValue[])).rows);
        await client.query("COMMIT");
        return result;
      } catch (error) {
        await client.query("ROLLBACK").catch(() => undefined);
        throw error;
      } finally {
        client.release();
      }
    },
    close: () => pool.end(),
  };
}
