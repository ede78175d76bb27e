/** `--model-load-thread-count`: how many model versions load at once; the others wait their turn in order. */
export class LoadSlots {
  #free: number;
  readonly #waiters: (() => void)[] = [];

  constructor(count: number) {
    this.#free = Math.max(1, count);
  }

  async acquire(): Promise<void> {
    if (this.#free > 0) {
      this.#free--;
      return;
    }
    await new Promise<void>((resolve) => this.#waiters.push(resolve));
  }

  release(): void {
    const next = this.#waiters.shift();
    if (next) next();
    else this.#free++;
  }
}
