/// <reference path="./gifenc.d.ts" />
// Animated GIFs: written with gifenc (a palette per frame, quantised from the frame itself), read
// with omggif (the input of galley-video --input).
import * as gifencModule from "gifenc";
import { GifReader } from "omggif";
import type { Video } from "./video.js";

// gifenc's CommonJS build (Node) has its functions on the default export, its ES build (vitest) as named exports.
type Gifenc = typeof gifencModule.default;
const loaded = gifencModule as unknown as Gifenc & { default?: Gifenc };
const gifenc: Gifenc = typeof loaded.GIFEncoder === "function" ? loaded : (loaded.default as Gifenc);
const { applyPalette, GIFEncoder, quantize } = gifenc;

/** Encode frames as an animated GIF that loops forever, `fps` frames per second. */
export function encodeGif(video: Video, fps = 8): Uint8Array {
  const gif = GIFEncoder();
  const plane = video.height * video.width;
  const rgba = new Uint8Array(plane * 4);
  for (let f = 0; f < video.count; f++) {
    for (let p = 0; p < plane; p++) {
      rgba[p * 4] = video.rgb[(f * plane + p) * 3] ?? 0;
      rgba[p * 4 + 1] = video.rgb[(f * plane + p) * 3 + 1] ?? 0;
      rgba[p * 4 + 2] = video.rgb[(f * plane + p) * 3 + 2] ?? 0;
      rgba[p * 4 + 3] = 255;
    }
    const palette = quantize(rgba, 256);
    const index = applyPalette(rgba, palette);
    gif.writeFrame(index, video.width, video.height, { palette, delay: Math.round(1000 / fps), repeat: 0 });
  }
  gif.finish();
  return gif.bytes();
}

/** Decode every frame of a GIF, composited, as RGB. */
export function decodeGif(bytes: Uint8Array): Video {
  const reader = new GifReader(bytes);
  const { width, height } = reader;
  const count = reader.numFrames();
  const rgba = new Uint8Array(width * height * 4);
  const rgb = new Uint8Array(count * width * height * 3);
  for (let f = 0; f < count; f++) {
    reader.decodeAndBlitFrameRGBA(f, rgba);
    for (let p = 0; p < width * height; p++)
      for (let c = 0; c < 3; c++) rgb[(f * width * height + p) * 3 + c] = rgba[p * 4 + c] ?? 0;
  }
  return { count, height, width, rgb };
}
