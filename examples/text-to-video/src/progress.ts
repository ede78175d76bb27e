// Progress on a terminal (one bar, redrawn) or anywhere else (one plain line per update).

export interface ProgressOutput {
  write(text: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

export function createProgress(out: ProgressOutput, now: () => number = () => performance.now()) {
  const start = now();
  let drawn = false;
  return {
    update(stage: string, step: number, total: number): void {
      const elapsed = (now() - start) / 1000;
      const eta = step > 0 ? (elapsed / step) * (total - step) : Number.NaN;
      const etaText = Number.isFinite(eta) ? `ETA ${eta.toFixed(1)}s` : "ETA --";
      const label = `step ${step}/${total} ${stage.padEnd(7)} ${elapsed.toFixed(1)}s ${etaText}`;
      if (out.isTTY) {
        const width = Math.max(10, Math.min(40, (out.columns ?? 80) - label.length - 4));
        const filled = total > 0 ? Math.round((step / total) * width) : 0;
        out.write(`\r[${"#".repeat(filled)}${".".repeat(width - filled)}] ${label}`);
        drawn = true;
      } else {
        out.write(`${label}\n`);
      }
    },
    /** End the bar's line (terminal only). */
    done(): void {
      if (drawn) out.write("\n");
      drawn = false;
    },
  };
}
