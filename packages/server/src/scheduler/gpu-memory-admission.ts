import { type Clock, systemClock } from "../base/clock.js";
import type { DeviceMemoryReader, DeviceMemoryReading } from "../base/device-memory.js";
import type { Logger } from "../base/log.js";
import type { BatchMemory } from "./batch-memory.js";

/** Options of {@link GpuMemoryAdmission}. */
export interface GpuMemoryAdmissionOptions {
  reader: DeviceMemoryReader;
  /** `--gpu-memory-reserve`: bytes of each GPU's free memory no batch may take. */
  reserveBytes: number;
  /** `--gpu-memory-wait-secs` in ms: the longest a batch waits for room before its requests fail. */
  waitMs: number;
  /** While a batch waits for room, the GPUs are read again this often (ms), to see memory others freed. */
  pollMs?: number;
  log: Logger;
  clock?: Clock;
}

/** Default of {@link GpuMemoryAdmissionOptions.pollMs}. */
export const GPU_MEMORY_POLL_MS = 50;

/** An admitted batch: its size, and the call that ends its reservation (once it ran). */
export interface AdmittedBatch {
  size: number;
  release(): void;
}

/**
 * GPU-memory admission, one for the server: whether a batch may start on a GPU now. Room is the
 * device's free memory (NVML) plus what this process' allocator keeps cached, less the reserve and
 * less what batches admitted since the last reading may still take. A batch fits when the working
 * memory its model took at that size (or, for a size never run, its largest per-sample figure
 * times the size: {@link BatchMemory}) fits the room; a batch whose model was never measured runs
 * only when nothing else runs on that GPU (so its own peak is measured, and it cannot collide).
 * When nothing fits, the allocator's cache is released once and the GPUs read again; schedulers
 * subscribed with {@link onRoom} look again after every reading. Readings are taken off the event
 * loop: after every batch ends, and every `pollMs` while a batch waits.
 */
export class GpuMemoryAdmission {
  readonly #reader: DeviceMemoryReader;
  readonly #reserve: number;
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #pollMs: number;
  /** The wait limit in ns, as schedulers apply it. */
  readonly waitNs: bigint;
  #readings: ReadonlyMap<number, DeviceMemoryReading> | undefined;
  /** Bytes reserved by admitted batches still running, and how many of those ran unmeasured, by GPU. */
  readonly #inFlight = new Map<number, { bytes: number; batches: number }>();
  readonly #listeners = new Set<() => void>();
  #reading: Promise<void> | undefined;
  #again = false;
  #released = false;
  #poll: unknown;
  #waiting = false;
  /** Batches refused so far (for metrics and tests). */
  refused = 0;

  constructor(options: GpuMemoryAdmissionOptions) {
    this.#reader = options.reader;
    this.#reserve = options.reserveBytes;
    this.#log = options.log;
    this.#clock = options.clock ?? systemClock;
    this.#pollMs = options.pollMs ?? GPU_MEMORY_POLL_MS;
    this.waitNs = BigInt(Math.round(options.waitMs * 1e6));
  }

  /** `listener` is called after every reading of the GPUs (a scheduler looks at its queue again). */
  onRoom(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** The bytes a batch may take on `device` now; undefined until the GPUs were read, or for a GPU NVML does not show. */
  room(device: number): number | undefined {
    const reading = this.#readings?.get(device);
    if (!reading) return undefined;
    const inFlight = this.#inFlight.get(device)?.bytes ?? 0;
    return reading.freeBytes + (reading.cachedBytes ?? 0) - this.#reserve - inFlight;
  }

  /**
   * The largest of `sizes` (batch sizes a scheduler could send now, ascending) that fits on
   * `device`, reserved until `release()`; undefined when none fits now (the scheduler waits for
   * {@link onRoom}). Before the first reading, nothing is admitted (a reading is started). Where
   * NVML does not show the GPU, everything is admitted: there is nothing to judge by.
   */
  admit(device: number, memory: BatchMemory, sizes: readonly number[]): AdmittedBatch | undefined {
    if (!this.#readings) {
      this.refresh();
      return undefined;
    }
    const room = this.room(device);
    const running = this.#inFlight.get(device)?.batches ?? 0;
    for (let i = sizes.length - 1; i >= 0; i--) {
      const size = sizes[i] as number;
      const estimate = memory.estimate(size);
      if (room === undefined) return this.#reserveRoom(device, size, 0);
      if (estimate === undefined) {
        // Never measured: alone on the GPU, and only the smallest size.
        if (running === 0 && room > 0) return this.#reserveRoom(device, sizes[0] as number, room);
        break;
      }
      if (estimate <= room) return this.#reserveRoom(device, size, estimate);
    }
    this.refused++;
    this.#short(device);
    return undefined;
  }

  /** Read the GPUs again (off the event loop), then tell every listener. */
  refresh(): Promise<void> {
    if (this.#reading) {
      this.#again = true;
      return this.#reading;
    }
    this.#reading = (async () => {
      try {
        do {
          this.#again = false;
          this.#readings = await this.#reader.read();
        } while (this.#again);
      } catch (error) {
        // A reader that breaks its word: keep the last readings, and say why once per failure.
        this.#log.warn(`reading GPU memory failed: ${(error as Error).message}`);
        // Never read: no figures, so nothing to hold batches back by.
        this.#readings ??= new Map();
      } finally {
        this.#reading = undefined;
      }
      for (const listener of [...this.#listeners]) listener();
    })();
    return this.#reading;
  }

  /** Stop polling (the server is closing). */
  close(): void {
    if (this.#poll !== undefined) this.#clock.clearTimer(this.#poll);
    this.#poll = undefined;
    this.#listeners.clear();
  }

  #reserveRoom(device: number, size: number, bytes: number): AdmittedBatch {
    const entry = this.#inFlight.get(device) ?? { bytes: 0, batches: 0 };
    entry.bytes += bytes;
    entry.batches++;
    this.#inFlight.set(device, entry);
    this.#released = false;
    let done = false;
    return {
      size,
      release: () => {
        if (done) return;
        done = true;
        entry.bytes -= bytes;
        entry.batches--;
        this.refresh();
      },
    };
  }

  /** Nothing fits: release the allocator's cache once (until a batch is admitted again), and poll while short. */
  #short(device: number): void {
    if (!this.#released) {
      this.#released = true;
      this.#log.verbose(1, `GPU ${device}: not enough free memory for the next batch; releasing the allocator's cache`);
      this.#reader.releaseCache().then(() => this.refresh());
    }
    if (this.#waiting) return;
    this.#waiting = true;
    this.#poll = this.#clock.setTimer(() => {
      this.#poll = undefined;
      this.#waiting = false;
      this.refresh();
    }, this.#pollMs);
  }
}
