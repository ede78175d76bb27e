/** Where a command writes, and where it runs; the real process by default (tests pass their own). */
export interface CommandIO {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  cwd: string;
}

export function processIO(): CommandIO {
  return {
    stdout: (text) => process.stdout.write(text),
    stderr: (text) => process.stderr.write(text),
    cwd: process.cwd(),
  };
}

/** A command-line mistake: reported with the command's usage, exit code 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** Triton's model-status table, as tritonserver prints it at startup. */
export function table(rows: string[][]): string {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length))) ?? [];
  const rule = `+${widths.map((w) => "-".repeat(w + 2)).join("+")}+\n`;
  const line = (r: string[]) => `|${r.map((cell, i) => ` ${cell.padEnd(widths[i] ?? 0)} `).join("|")}|\n`;
  const [head, ...body] = rows;
  return rule + (head ? line(head) : "") + rule + body.map(line).join("") + rule;
}
