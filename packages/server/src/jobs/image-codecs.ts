/// <reference path="./gifenc.d.ts" />
// Still images and GIFs from RGB frames, in JavaScript (run in the encoder's worker thread, never
// on the main thread): PNG for thumbnails and previews, an animated GIF for a video when no
// ffmpeg is on PATH.
import { crc32, deflateSync } from "node:zlib";
import * as gifencModule from "gifenc";

/** Frames of RGB bytes, `[count, height, width, 3]` interleaved. */
export interface Frames {
  count: number;
  height: number;
  width: number;
  rgb: Uint8Array;
}

// gifenc's CommonJS build (Node) has its functions on the default export, its ES build (vitest) as named exports.
type Gifenc = typeof gifencModule.default;
const loaded = gifencModule as unknown as Gifenc & { default?: Gifenc };
const gifenc: Gifenc = typeof loaded.GIFEncoder === "function" ? loaded : (loaded.default as Gifenc);

/** An animated GIF of every frame, looping, `fps` frames per second (a palette per frame). */
export function encodeGif(frames: Frames, fps: number): Uint8Array {
  const gif = gifenc.GIFEncoder();
  const plane = frames.height * frames.width;
  const rgba = new Uint8Array(plane * 4).fill(255);
  for (let f = 0; f < frames.count; f++) {
    for (let p = 0; p < plane; p++) {
      const at = (f * plane + p) * 3;
      rgba[p * 4] = frames.rgb[at] ?? 0;
      rgba[p * 4 + 1] = frames.rgb[at + 1] ?? 0;
      rgba[p * 4 + 2] = frames.rgb[at + 2] ?? 0;
    }
    const palette = gifenc.quantize(rgba, 256);
    const index = gifenc.applyPalette(rgba, palette);
    gif.writeFrame(index, frames.width, frames.height, { palette, delay: Math.round(1000 / fps), repeat: 0 });
  }
  gif.finish();
  return gif.bytes();
}

function chunk(type: string, data: Uint8Array): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, "latin1");
  const tail = Buffer.alloc(4);
  tail.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])), 0);
  return Buffer.concat([head, data, tail]);
}

/** The first frame as a PNG (8-bit RGB, no filtering). */
export function encodePng(frames: Frames): Uint8Array {
  const { width, height, rgb } = frames;
  const rows = Buffer.alloc(height * (width * 3 + 1));
  for (let y = 0; y < height; y++) {
    rows.set(rgb.subarray(y * width * 3, (y + 1) * width * 3), y * (width * 3 + 1) + 1);
  }
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header.set([8, 2, 0, 0, 0], 8);
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", header),
    chunk("IDAT", deflateSync(rows)),
    chunk("IEND", new Uint8Array(0)),
  ]);
}
