/** The kind of a message that carries several messages posted in one go (see {@link coalescingPost}). */
export const COALESCED = "coalesced";

/** Several messages, in the order they were sent, in one `postMessage`. */
export interface Coalesced<M> {
  kind: typeof COALESCED;
  messages: M[];
}

/** Posts one message (or a {@link Coalesced} group) with the buffers that move with it; throws as `postMessage` does. */
export type PostMessage<M> = (message: M | Coalesced<M>, transfer: ArrayBuffer[]) => void;

/**
 * A `send` that posts the first message at once and the ones sent after it during the same run
 * of callbacks and microtasks together, in one `postMessage`, when that run is done
 * (`process.nextTick` runs after the microtasks already queued). Waking a thread costs far more
 * than cloning a small message (on a 2-vCPU VM a ping-pong of one small message costs ~60 µs of
 * CPU, eight per message ~19 µs each), and a batch's responses, or the BLS calls a pipeline's
 * users make after one batch of a model, are sent in one such run. The first goes at once so
 * the receiver starts while the sender is still busy (deferring it costs a wake-up on the way
 * back). Order is kept. A buffer that cannot move (Node's Buffer pool) makes its message or group
 * go as a copy; one that cannot be posted at all is reported to `failed`. Moving the tail's
 * buffers at the end of the run rather than at `send` is safe because a sent buffer belongs to
 * the receiver from then on (docs/guides/scripted-models.md).
 */
export function coalescingPost<M>(
  post: PostMessage<M>,
  failed: (error: unknown) => void,
): (message: M, transfer?: Iterable<ArrayBuffer>) => void {
  let queue: M[] = [];
  let moving = new Set<ArrayBuffer>();
  let open = false;
  const postOrCopy = (message: M | Coalesced<M>, transfer: ArrayBuffer[]) => {
    try {
      post(message, transfer);
    } catch {
      try {
        post(message, []);
      } catch (error) {
        failed(error);
      }
    }
  };
  const flush = () => {
    open = false;
    if (queue.length === 0) return;
    const messages = queue;
    const transfer = [...moving];
    queue = [];
    moving = new Set();
    postOrCopy(messages.length === 1 ? (messages[0] as M) : { kind: COALESCED, messages }, transfer);
  };
  return (message, transfer = []) => {
    if (!open) {
      open = true;
      process.nextTick(flush);
      postOrCopy(message, [...transfer]);
      return;
    }
    queue.push(message);
    for (const buffer of transfer) moving.add(buffer);
  };
}

/** Hand each message of `message` (a {@link Coalesced} group, or a single one) to `each`, in order. */
export function forEachMessage<M>(message: M | Coalesced<M>, each: (message: M) => void): void {
  if (isCoalesced(message)) for (const one of message.messages) each(one);
  else each(message);
}

function isCoalesced<M>(message: M | Coalesced<M>): message is Coalesced<M> {
  return typeof message === "object" && message !== null && (message as { kind?: unknown }).kind === COALESCED;
}
