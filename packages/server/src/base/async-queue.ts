// One side pushes, the other reads with `for await`: the hand-off behind streams of requests and
// responses (a gRPC stream's decoded requests, a decoupled model's responses, a BLS stream).

/** Items in the order pushed, read as an async iterable that waits while the queue is empty. */
export interface AsyncQueue<T> extends AsyncIterable<T> {
  /** Adds an item; a reader waiting for one takes it. */
  push(item: T): void;
  /** No more items: reading ends once those already pushed are taken. */
  end(): void;
}

/**
 * An unbounded queue for one reader. Items pushed after {@link AsyncQueue.end} are still read if
 * the reader has not yet found the queue empty; a reader that stops early (`break`) leaves the rest.
 */
export function createAsyncQueue<T>(): AsyncQueue<T> {
  const items: T[] = [];
  let ended = false;
  let wake: (() => void) | undefined;
  return {
    push(item) {
      items.push(item);
      wake?.();
    },
    end() {
      ended = true;
      wake?.();
    },
    async *[Symbol.asyncIterator]() {
      while (true) {
        if (items.length > 0) {
          yield items.shift() as T;
          continue;
        }
        if (ended) return;
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = undefined;
      }
    },
  };
}
