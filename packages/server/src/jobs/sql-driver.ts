// What the job store needs of a SQL database: parameterised statements and transactions. SQL is
// written once with PostgreSQL's `$1` placeholders; the SQLite driver numbers them its way (`?1`).

/** A row as the database returns it. */
export type Row = Record<string, unknown>;

/** A value a statement binds. */
export type SqlValue = string | number | null;

/** One database connection (or pool) that runs statements. */
export interface SqlDriver {
  /** `sqlite` or `postgres`: where the two differ (DDL, row locks). */
  readonly dialect: "sqlite" | "postgres";
  /** Run one statement; its rows (an empty list for statements that return none). */
  query(sql: string, params?: readonly SqlValue[]): Promise<Row[]>;
  /** Run `work` in one transaction on one connection; rolled back if it throws. */
  transaction<T>(work: (query: SqlDriver["query"]) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}
