import type { HostToInstance, InstanceProtocol, InstanceToHost } from "./host-messages.js";
import type { TransportFactory } from "./instance-transport.js";

/**
 * A model instance that runs on native threads of its own inside this process (a libtorch module
 * on its thread): the host's messages become calls, and their answers messages. It must not throw
 * past its promises; a rejection becomes the matching failure message.
 */
export interface NativeInstance<P extends InstanceProtocol> {
  /** Load the model; resolves with what the host reports as the instance's info. */
  start(init: P["init"]): Promise<P["info"]>;
  /** Run one batch; a model's error is part of the result, a rejection fails the batch with its message. */
  execute(batch: P["batch"]): Promise<P["result"]>;
  /** Release everything (the model, its thread); called once, at stop or kill. */
  close(): Promise<void>;
}

/**
 * Instances on native threads (see `NativeInstance`): each start creates a fresh one with
 * `create`. There is no thread or process to hand messages to, so a batch's inputs are passed as
 * they are (no transfer, no copy) and `kill` closes the instance, which ends once its thread has
 * finished what it was running. Answers are always delivered after `send` returns.
 */
export function nativeTransport<P extends InstanceProtocol>(
  create: () => NativeInstance<P>,
): TransportFactory<HostToInstance<P>, InstanceToHost<P>> {
  return (events) => {
    const instance = create();
    let ended = false;
    let closing: Promise<void> | undefined;
    const close = () => {
      closing ??= instance.close().catch(() => undefined);
      return closing;
    };
    const reply = (message: InstanceToHost<P>) => {
      if (!ended) events.message(message);
    };
    const end = (reason: string) => {
      if (ended) return;
      ended = true;
      events.ended(reason);
    };
    const handle = async (received: HostToInstance<P>): Promise<void> => {
      // The host's own kinds (a backend's own messages have other kinds, and none here).
      const message = received as
        | { kind: "start"; init: P["init"] }
        | { kind: "execute"; batch: number; payload: P["batch"] }
        | { kind: "cancel" | "stop" };
      switch (message.kind) {
        case "start":
          try {
            reply({ kind: "started", info: await instance.start(message.init) });
          } catch (error) {
            reply({ kind: "start-failed", message: (error as Error).message });
          }
          return;
        case "execute":
          try {
            reply({ kind: "executed", batch: message.batch, result: await instance.execute(message.payload) });
          } catch (error) {
            // Nothing else answers the batch: end the instance, which fails it and restarts.
            await close();
            end(`failed: ${(error as Error).message}`);
          }
          return;
        case "stop":
          await close();
          reply({ kind: "stopped" });
          return;
        default:
          // cancel: a batch on a native thread runs to its end; the backend's own messages: none.
          return;
      }
    };
    return {
      send(message) {
        void Promise.resolve().then(() => handle(message));
      },
      async kill() {
        await close();
        end("was stopped");
      },
    };
  };
}
