// The served Real-ESRGAN model against references computed without it: the golden made by
// scripts/ncnn-reference.ts (a loop-by-loop forward pass over the original ncnn weights), and a
// fixed cartoon image downscaled 4x, where super-resolution is compared with bicubic upscaling.
import { readFileSync } from "node:fs";
import { type GrpcClient, tensor } from "@galley/client";
import type { GalleyServer } from "@galley/server";
import { afterAll, beforeAll, expect, it } from "vitest";
import { cartoonImage } from "../scripts/test-image.js";
import { startExampleServer } from "./example-server.js";

let server: GalleyServer;
let client: GrpcClient;

beforeAll(async () => {
  ({ server, client } = await startExampleServer());
});

afterAll(async () => {
  await server?.close();
});

async function superResolve(image: Float32Array, size: number): Promise<Float32Array> {
  const result = await client.infer("super_resolution", { inputs: { input: tensor.fp32([1, 3, size, size], image) } });
  expect(result.output("output").shape).toEqual([1, 3, size * 4, size * 4]);
  return result.output("output").fp32();
}

/** Keys' bicubic (a = -0.5), half-pixel centres, edges clamped. */
function bicubic4x(image: Float32Array, size: number): Float32Array {
  const kernel = (t: number) => {
    const a = -0.5;
    const x = Math.abs(t);
    return x <= 1 ? ((a + 2) * x - (a + 3)) * x * x + 1 : x < 2 ? ((a * x - 5 * a) * x + 8 * a) * x - 4 * a : 0;
  };
  const big = size * 4;
  const out = new Float32Array(3 * big * big);
  for (let c = 0; c < 3; c++)
    for (let y = 0; y < big; y++)
      for (let x = 0; x < big; x++) {
        const sy = (y + 0.5) / 4 - 0.5;
        const sx = (x + 0.5) / 4 - 0.5;
        let v = 0;
        for (let m = -1; m <= 2; m++)
          for (let n = -1; n <= 2; n++) {
            const yy = Math.min(size - 1, Math.max(0, Math.floor(sy) + m));
            const xx = Math.min(size - 1, Math.max(0, Math.floor(sx) + n));
            v +=
              (image[(c * size + yy) * size + xx] ?? 0) *
              kernel(sy - (Math.floor(sy) + m)) *
              kernel(sx - (Math.floor(sx) + n));
          }
        out[(c * big + y) * big + x] = v;
      }
  return out;
}

const clamp = (v: number) => Math.min(1, Math.max(0, v));

function psnr(a: Float32Array, reference: Float32Array): number {
  let error = 0;
  for (let i = 0; i < a.length; i++) error += (clamp(a[i] ?? 0) - (reference[i] ?? 0)) ** 2;
  return 10 * Math.log10(1 / (error / a.length));
}

it("equals the golden computed from the ncnn weights by an independent implementation", async () => {
  const golden = new Float32Array(
    new Uint8Array(readFileSync(new URL("./fixtures/sr-golden.bin", import.meta.url))).buffer,
  );
  const input = golden.slice(0, 3 * 16 * 16);
  const expected = golden.subarray(3 * 16 * 16);
  const output = await superResolve(input, 16);
  let worst = 0;
  for (let i = 0; i < expected.length; i++) worst = Math.max(worst, Math.abs((output[i] ?? 0) - (expected[i] ?? 0)));
  expect(worst).toBeLessThan(1e-3);
});

it("is measured against bicubic upscaling on a fixed image downscaled 4x (PSNR)", async () => {
  const big = 128;
  const small = 32;
  const original = cartoonImage(big);
  const lowRes = new Float32Array(3 * small * small); // 4x4 box average
  for (let c = 0; c < 3; c++)
    for (let y = 0; y < small; y++)
      for (let x = 0; x < small; x++) {
        let sum = 0;
        for (let dy = 0; dy < 4; dy++)
          for (let dx = 0; dx < 4; dx++) sum += original[(c * big + y * 4 + dy) * big + x * 4 + dx] ?? 0;
        lowRes[(c * small + y) * small + x] = sum / 16;
      }
  const sr = await superResolve(lowRes, small);
  const cubic = bicubic4x(lowRes, small);
  // Real-ESRGAN is trained for perceptual quality (a GAN loss), not PSNR: on this image it is about
  // 1.2 dB BELOW bicubic (25.4 vs 26.6 dB), so "higher PSNR than bicubic" does not hold; the bounds
  // pin today's figures so that a broken conversion (tens of dB lower) shows.
  const [srPsnr, cubicPsnr] = [psnr(sr, original), psnr(cubic, original)];
  expect(srPsnr).toBeGreaterThan(24.5);
  expect(srPsnr).toBeGreaterThan(cubicPsnr - 2);
});
