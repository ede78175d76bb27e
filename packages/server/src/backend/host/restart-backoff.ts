/** The first restart after a failure is immediate; each further one waits twice as long, up to the cap. */
export const RESTART_BACKOFF_FIRST_MS = 100;
/** The longest wait between restarts. */
export const RESTART_BACKOFF_MAX_MS = 30_000;
/** An instance that stayed up this long resets the back-off: its next failure restarts it at once. */
export const RESTART_BACKOFF_RESET_MS = 10_000;

/**
 * How long to wait before the next restart of an instance that failed: 0 after a first failure,
 * then {@link RESTART_BACKOFF_FIRST_MS} doubling to {@link RESTART_BACKOFF_MAX_MS}, back to 0 once
 * the instance has stayed up for {@link RESTART_BACKOFF_RESET_MS}.
 */
export class RestartBackoff {
  #failures = 0;

  /** The wait before restarting after a failure; `upForMs`: how long the instance had been up (0: never). */
  next(upForMs: number): number {
    if (upForMs >= RESTART_BACKOFF_RESET_MS) this.#failures = 0;
    const delay =
      this.#failures === 0 ? 0 : Math.min(RESTART_BACKOFF_MAX_MS, RESTART_BACKOFF_FIRST_MS * 2 ** (this.#failures - 1));
    this.#failures++;
    return delay;
  }
}
