import type { InferInput, RequestedOutput } from "./client-types.js";
import type { DataType } from "./tensor.js";

/** The bytes of a region as {@link SharedRegion} reads and writes them. */
export interface RegionBytes {
  read(offset: number, length: number): Promise<Uint8Array>;
  write(offset: number, bytes: Uint8Array): Promise<void>;
}

/**
 * What system and CUDA shared-memory regions have in common: bounds-checked reads and writes,
 * and the inputs and outputs that name a range of the region in a request.
 */
export abstract class SharedRegion {
  #disposed = false;

  protected constructor(
    /** The name the server knows the region by. */
    readonly name: string,
    readonly byteSize: number,
    /** "region" or "CUDA region", as error messages name it. */
    private readonly kind: string,
    private readonly bytes: RegionBytes,
  ) {}

  /** Whether {@link SharedRegion.markDisposed} was called (the subclass's dispose). */
  protected get disposed(): boolean {
    return this.#disposed;
  }

  protected markDisposed(): void {
    this.#disposed = true;
  }

  /** Copy `bytes` (any typed array or DataView) into the region at `offset`; resolves once they are there. */
  async write(offset: number, bytes: ArrayBufferView): Promise<void> {
    this.check(offset, bytes.byteLength);
    const view = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    await this.bytes.write(offset, view);
  }

  /** Copy `length` bytes at `offset` out of the region into a new buffer. */
  async read(offset: number, length: number): Promise<Uint8Array> {
    this.check(offset, length);
    return this.bytes.read(offset, length);
  }

  /** An input whose bytes are in this region. */
  input(datatype: DataType, shape: readonly number[], offset: number, byteSize: number): InferInput {
    this.check(offset, byteSize);
    return { datatype, shape: [...shape], sharedMemory: { region: this.name, offset, byteSize } };
  }

  /** An output the server writes into this region. */
  output(name: string, offset: number, byteSize: number): RequestedOutput {
    this.check(offset, byteSize);
    return { name, sharedMemory: { region: this.name, offset, byteSize } };
  }

  /** Throws unless `[offset, offset + length)` lies inside the region and it is not disposed. */
  protected check(offset: number, length: number): void {
    if (this.#disposed) {
      throw new Error(`${this.kind.replace("region", "shared memory region")} '${this.name}' was disposed`);
    }
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0) {
      throw new RangeError(`offset and length must be non-negative integers, got ${offset} and ${length}`);
    }
    if (offset + length > this.byteSize) {
      throw new RangeError(
        `[${offset}, ${offset + length}) is outside ${this.kind} '${this.name}' of ${this.byteSize} bytes`,
      );
    }
  }
}
