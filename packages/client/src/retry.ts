import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";

/** Retries of idempotent calls that fail with UNAVAILABLE (a server restarting, a connection lost). */
export interface RetryOptions {
  /** Attempts after the first; default 3. 0 turns retries off. */
  maxRetries?: number;
  /** The first backoff, doubled each time with ±20 % jitter; default 100 ms. */
  initialBackoffMs?: number;
  /** The longest backoff; default 2000 ms. */
  maxBackoffMs?: number;
}

/**
 * The RPCs that change nothing on the server, so that repeating one is safe. Inference, model
 * loading and shared-memory registration are never retried: a request may have reached the
 * server before the connection failed.
 */
export const IDEMPOTENT_METHODS: ReadonlySet<string> = new Set([
  "ServerLive",
  "ServerReady",
  "ModelReady",
  "ServerMetadata",
  "ModelMetadata",
  "ModelConfig",
  "ModelStatistics",
  "RepositoryIndex",
  "SystemSharedMemoryStatus",
  "CudaSharedMemoryStatus",
  "Check",
]);

/** An interceptor retrying {@link IDEMPOTENT_METHODS} on UNAVAILABLE with exponential backoff. */
export function retryInterceptor(options: RetryOptions = {}): Interceptor {
  const max = options.maxRetries ?? 3;
  const initial = options.initialBackoffMs ?? 100;
  const cap = options.maxBackoffMs ?? 2000;
  return (next) => async (request) => {
    if (request.stream || !IDEMPOTENT_METHODS.has(request.method.name)) return next(request);
    for (let attempt = 0; ; attempt++) {
      try {
        return await next(request);
      } catch (error) {
        const retryable = error instanceof ConnectError && error.code === Code.Unavailable;
        if (!retryable || attempt >= max || request.signal.aborted) throw error;
        const backoff = Math.min(cap, initial * 2 ** attempt) * (0.8 + 0.4 * Math.random());
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, backoff);
          request.signal.addEventListener(
            "abort",
            () => {
              clearTimeout(timer);
              resolve();
            },
            { once: true },
          );
        });
      }
    }
  };
}
