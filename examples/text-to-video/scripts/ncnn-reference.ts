// A direct, loop-by-loop forward pass of an ncnn network read by ncnn.ts, for one CHW float32
// image. It shares no code with the ONNX conversion or ONNX Runtime, so its output is an
// independent reference for the converted model (the golden in test/fixtures).
import type { NcnnLayer } from "./ncnn.js";

interface Blob {
  c: number;
  h: number;
  w: number;
  data: Float32Array;
}

function convolution(x: Blob, layer: NcnnLayer): Blob {
  const outC = layer.params.get(0) ?? 0;
  const k = layer.params.get(1) ?? 1;
  const pad = layer.params.get(4) ?? 0;
  if ((layer.params.get(3) ?? 1) !== 1 || (layer.params.get(2) ?? 1) !== 1)
    throw new Error(`${layer.name}: only stride 1, dilation 1`);
  const weight = layer.weight as Float32Array;
  const h = x.h + 2 * pad - k + 1;
  const w = x.w + 2 * pad - k + 1;
  const out = new Float32Array(outC * h * w);
  for (let o = 0; o < outC; o++) {
    const bias = layer.bias?.[o] ?? 0;
    const plane = out.subarray(o * h * w, (o + 1) * h * w);
    plane.fill(bias);
    for (let i = 0; i < x.c; i++) {
      const input = x.data.subarray(i * x.h * x.w, (i + 1) * x.h * x.w);
      for (let ky = 0; ky < k; ky++) {
        for (let kx = 0; kx < k; kx++) {
          const wv = weight[((o * x.c + i) * k + ky) * k + kx] ?? 0;
          for (let y = 0; y < h; y++) {
            const sy = y + ky - pad;
            if (sy < 0 || sy >= x.h) continue;
            for (let xx = 0; xx < w; xx++) {
              const sx = xx + kx - pad;
              if (sx < 0 || sx >= x.w) continue;
              plane[y * w + xx] = (plane[y * w + xx] ?? 0) + wv * (input[sy * x.w + sx] ?? 0);
            }
          }
        }
      }
    }
  }
  return { c: outC, h, w, data: out };
}

function prelu(x: Blob, layer: NcnnLayer): Blob {
  const slope = layer.slope as Float32Array;
  const out = new Float32Array(x.data.length);
  const plane = x.h * x.w;
  for (let i = 0; i < out.length; i++) {
    const v = x.data[i] ?? 0;
    const s = slope.length === 1 ? (slope[0] ?? 0) : (slope[Math.floor(i / plane)] ?? 0);
    out[i] = v > 0 ? v : v * s;
  }
  return { ...x, data: out };
}

function pixelShuffle(x: Blob, r: number): Blob {
  const c = x.c / (r * r);
  const h = x.h * r;
  const w = x.w * r;
  const out = new Float32Array(c * h * w);
  for (let ch = 0; ch < c; ch++)
    for (let y = 0; y < h; y++)
      for (let xx = 0; xx < w; xx++) {
        const src = ch * r * r + (y % r) * r + (xx % r);
        out[(ch * h + y) * w + xx] = x.data[(src * x.h + Math.floor(y / r)) * x.w + Math.floor(xx / r)] ?? 0;
      }
  return { c, h, w, data: out };
}

function nearest(x: Blob, sy: number, sx: number): Blob {
  const h = Math.round(x.h * sy);
  const w = Math.round(x.w * sx);
  const out = new Float32Array(x.c * h * w);
  for (let c = 0; c < x.c; c++)
    for (let y = 0; y < h; y++)
      for (let xx = 0; xx < w; xx++)
        out[(c * h + y) * w + xx] = x.data[(c * x.h + Math.floor(y / sy)) * x.w + Math.floor(xx / sx)] ?? 0;
  return { c: x.c, h, w, data: out };
}

/** Run the network on one image [3, h, w]; returns the output blob's data and shape. */
export function runReference(
  layers: NcnnLayer[],
  image: Float32Array,
  h: number,
  w: number,
): { data: Float32Array; c: number; h: number; w: number } {
  const blobs = new Map<string, Blob>();
  let last: Blob | undefined;
  for (const layer of layers) {
    const input = blobs.get(layer.inputs[0] ?? "");
    let out: Blob;
    switch (layer.type) {
      case "Input":
        out = { c: 3, h, w, data: image };
        break;
      case "Split":
        for (const name of layer.outputs) blobs.set(name, input as Blob);
        continue;
      case "Convolution":
        out = convolution(input as Blob, layer);
        break;
      case "PReLU":
        out = prelu(input as Blob, layer);
        break;
      case "PixelShuffle":
        out = pixelShuffle(input as Blob, layer.params.get(0) ?? 1);
        break;
      case "Interp":
        if (layer.params.get(0) !== 1) throw new Error(`${layer.name}: only nearest Interp in the reference`);
        out = nearest(input as Blob, layer.params.get(1) ?? 1, layer.params.get(2) ?? 1);
        break;
      case "BinaryOp": {
        if ((layer.params.get(0) ?? 0) !== 0) throw new Error(`${layer.name}: only Add`);
        const b = blobs.get(layer.inputs[1] ?? "") as Blob;
        const a = input as Blob;
        out = { ...a, data: a.data.map((v, i) => v + (b.data[i] ?? 0)) };
        break;
      }
      default:
        throw new Error(`layer type ${layer.type}`);
    }
    blobs.set(layer.outputs[0] ?? "", out);
    last = out;
  }
  if (!last) throw new Error("empty network");
  return last;
}
