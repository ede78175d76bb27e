// Progress on a terminal (one bar, redrawn, its clock ticking between updates) or anywhere else
// (one plain line per update).

export interface ProgressOutput {
  write(text: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

/** One progress update. */
export interface ProgressUpdate {
  /** What is running ("denoise", "decode", "upscale", "interpolate"...). */
  stage: string;
  /** Steps done, of `total`, over every stage. */
  step: number;
  total: number;
  /**
   * The step at which this stage's steps end, when they all cost about the same (denoising steps,
   * one frame each): the ETA is to that step, from this stage's pace. Left out for a stage whose
   * length cannot be told (text_to_video's decode, upscale and interpolation after its last
   * denoising step): no ETA is shown rather than a wrong one.
   */
  until?: number;
}

/**
 * A progress display. The ETA is `(time per step in this stage) x (steps left in it)`, measured
 * from the stage's start (the previous stage's last update; for the first stage, its first
 * update): it never counts set-up time as a step, and never promises 0.0s while work of an
 * unknown length is left.
 */
export function createProgress(out: ProgressOutput, now: () => number = () => performance.now()) {
  const start = now();
  let drawn = false;
  let stageName: string | undefined;
  let stageStart = { at: start, step: 0 };
  let last: { update: ProgressUpdate; at: number; eta: number } | undefined;
  let ticker: NodeJS.Timeout | undefined;

  const label = (at: number): string => {
    if (!last) return "";
    const { stage, step, total, until } = last.update;
    const elapsed = (at - start) / 1000;
    let text = `step ${step}/${total} ${stage.padEnd(7)} ${elapsed.toFixed(1)}s`;
    if (until !== undefined && step < until) {
      const eta = last.eta - (at - last.at) / 1000;
      text += ` stage ETA ${Number.isFinite(eta) ? `${Math.max(0, eta).toFixed(1)}s` : "--"}`;
    }
    return text;
  };
  const draw = (at: number) => {
    const text = label(at);
    if (!last) return;
    const { step, total } = last.update;
    const width = Math.max(10, Math.min(40, (out.columns ?? 80) - text.length - 4));
    const filled = total > 0 ? Math.round((Math.min(step, total) / total) * width) : 0;
    out.write(`\r[${"#".repeat(filled)}${".".repeat(width - filled)}] ${text}\x1b[K`);
    drawn = true;
  };

  return {
    update(update: ProgressUpdate): void {
      const at = now();
      if (update.stage !== stageName) {
        // A new stage starts where the last one's last update left off; the first stage is
        // measured from its first update (before it: connecting, set-up; not a step).
        stageStart = last ? { at: last.at, step: last.update.step } : { at, step: update.step };
        stageName = update.stage;
      }
      const done = update.step - stageStart.step;
      const perStep = done > 0 ? (at - stageStart.at) / 1000 / done : Number.NaN;
      const eta = update.until !== undefined ? perStep * (update.until - update.step) : Number.NaN;
      last = { update, at, eta };
      if (out.isTTY) {
        draw(at);
        // Between updates (a long decode, a long frame) the clock keeps moving.
        ticker ??= setInterval(() => draw(now()), 250);
        ticker.unref?.();
      } else {
        out.write(`${label(at)}\n`);
      }
    },
    /** Stop the clock and end the bar's line (terminal only). */
    done(): void {
      if (ticker) clearInterval(ticker);
      ticker = undefined;
      if (drawn) out.write("\n");
      drawn = false;
    },
  };
}
