// Reading and writing frames on disk: a GIF or a folder of PNG files in, PNG previews out.
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PNG } from "pngjs";
import { decodeGif } from "./gif.js";
import type { Video } from "./video.js";

/** A GIF file, or a folder whose .png files (in name order, all one size) are the frames. */
export function readFrames(path: string): Video {
  if (statSync(path).isDirectory()) {
    const files = readdirSync(path)
      .filter((f) => f.toLowerCase().endsWith(".png"))
      .sort();
    if (files.length === 0) throw new Error(`${path} has no .png files`);
    const images = files.map((f) => PNG.sync.read(readFileSync(join(path, f))));
    const { width, height } = images[0] as PNG;
    const rgb = new Uint8Array(images.length * width * height * 3);
    for (const [i, image] of images.entries()) {
      if (image.width !== width || image.height !== height)
        throw new Error(`${files[i]} is ${image.width}x${image.height}, the first frame ${width}x${height}`);
      for (let p = 0; p < width * height; p++)
        for (let c = 0; c < 3; c++) rgb[(i * width * height + p) * 3 + c] = image.data[p * 4 + c] ?? 0;
    }
    return { count: images.length, height, width, rgb };
  }
  return decodeGif(new Uint8Array(readFileSync(path)));
}

/** Write the first frame of `video` as a PNG file. */
export function writePng(path: string, video: Video): void {
  const png = new PNG({ width: video.width, height: video.height });
  for (let p = 0; p < video.width * video.height; p++) {
    for (let c = 0; c < 3; c++) png.data[p * 4 + c] = video.rgb[p * 3 + c] ?? 0;
    png.data[p * 4 + 3] = 255;
  }
  mkdirSync(join(path, ".."), { recursive: true });
  writeFileSync(path, PNG.sync.write(png));
}
