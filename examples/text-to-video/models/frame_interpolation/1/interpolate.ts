// Motion-compensated frame interpolation, the classical way (no network):
//
// 1. Motion estimation by block matching: the first frame of each pair is cut into 8×8 blocks;
//    for each block, the displacement v within ±R pixels whose block in the second frame has the
//    smallest sum of absolute luma differences wins (a small cost per pixel of displacement
//    breaks ties towards no motion; a match no better than 5% over no motion counts as none).
//    A 3×3 median filter removes lone outliers from the vector field.
// 2. Motion-compensated blending: a frame at fraction f between A and B takes, at each pixel p,
//    (1 - f) · A(p - f·v) + f · B(p + (1 - f)·v), with v interpolated bilinearly between block
//    centres and A, B sampled bilinearly. Where nothing moves this is the plain cross-fade.
//
// Frames are planar RGB float32 in [0, 1] ([n, 3, H, W]); the output is [count, H, W, 3] uint8,
// ready for an image encoder.

const BLOCK = 8;

interface Field {
  cols: number;
  rows: number;
  dx: Float32Array;
  dy: Float32Array;
}

function luma(frames: Float32Array, index: number, h: number, w: number): Float32Array {
  const plane = h * w;
  const base = index * 3 * plane;
  const out = new Float32Array(plane);
  for (let i = 0; i < plane; i++)
    out[i] =
      0.299 * (frames[base + i] ?? 0) + 0.587 * (frames[base + plane + i] ?? 0) + 0.114 * (frames[base + 2 * plane + i] ?? 0);
  return out;
}

function median3x3(values: Float32Array, cols: number, rows: number): Float32Array {
  const out = new Float32Array(values.length);
  const window: number[] = [];
  for (let r = 0; r < rows; r++)
    for (let c = 0; c < cols; c++) {
      window.length = 0;
      for (let dr = -1; dr <= 1; dr++)
        for (let dc = -1; dc <= 1; dc++) {
          const rr = r + dr;
          const cc = c + dc;
          if (rr >= 0 && rr < rows && cc >= 0 && cc < cols) window.push(values[rr * cols + cc] ?? 0);
        }
      window.sort((a, b) => a - b);
      out[r * cols + c] = window[window.length >> 1] ?? 0;
    }
  return out;
}

/** Block-matching motion field from a to b (luma planes). */
export function estimateMotion(a: Float32Array, b: Float32Array, h: number, w: number, radius: number): Field {
  const cols = Math.ceil(w / BLOCK);
  const rows = Math.ceil(h / BLOCK);
  const dx = new Float32Array(cols * rows);
  const dy = new Float32Array(cols * rows);
  const sad = (x0: number, y0: number, vx: number, vy: number) => {
    let sum = 0;
    for (let y = y0; y < Math.min(y0 + BLOCK, h); y++) {
      const sy = Math.min(h - 1, Math.max(0, y + vy));
      for (let x = x0; x < Math.min(x0 + BLOCK, w); x++) {
        const sx = Math.min(w - 1, Math.max(0, x + vx));
        sum += Math.abs((a[y * w + x] ?? 0) - (b[sy * w + sx] ?? 0));
      }
    }
    return sum;
  };
  for (let r = 0; r < rows; r++)
    for (let c = 0; c < cols; c++) {
      const x0 = c * BLOCK;
      const y0 = r * BLOCK;
      const still = sad(x0, y0, 0, 0);
      let best = still;
      let bestCost = still;
      let bx = 0;
      let by = 0;
      for (let vy = -radius; vy <= radius; vy++)
        for (let vx = -radius; vx <= radius; vx++) {
          if (vx === 0 && vy === 0) continue;
          const s = sad(x0, y0, vx, vy);
          const cost = s + 0.002 * BLOCK * BLOCK * (Math.abs(vx) + Math.abs(vy));
          if (cost < bestCost) {
            bestCost = cost;
            best = s;
            bx = vx;
            by = vy;
          }
        }
      if (best > 0.95 * still) {
        bx = 0;
        by = 0;
      }
      dx[r * cols + c] = bx;
      dy[r * cols + c] = by;
    }
  return { cols, rows, dx: median3x3(dx, cols, rows), dy: median3x3(dy, cols, rows) };
}

function sampleField(field: Field, values: Float32Array, x: number, y: number): number {
  const fx = Math.min(field.cols - 1, Math.max(0, (x + 0.5) / BLOCK - 0.5));
  const fy = Math.min(field.rows - 1, Math.max(0, (y + 0.5) / BLOCK - 0.5));
  const c0 = Math.floor(fx);
  const r0 = Math.floor(fy);
  const c1 = Math.min(field.cols - 1, c0 + 1);
  const r1 = Math.min(field.rows - 1, r0 + 1);
  const tx = fx - c0;
  const ty = fy - r0;
  const at = (r: number, c: number) => values[r * field.cols + c] ?? 0;
  return (at(r0, c0) * (1 - tx) + at(r0, c1) * tx) * (1 - ty) + (at(r1, c0) * (1 - tx) + at(r1, c1) * tx) * ty;
}

function bilinear(plane: Float32Array, offset: number, h: number, w: number, x: number, y: number): number {
  const cx = Math.min(w - 1, Math.max(0, x));
  const cy = Math.min(h - 1, Math.max(0, y));
  const x0 = Math.floor(cx);
  const y0 = Math.floor(cy);
  const x1 = Math.min(w - 1, x0 + 1);
  const y1 = Math.min(h - 1, y0 + 1);
  const tx = cx - x0;
  const ty = cy - y0;
  const at = (yy: number, xx: number) => plane[offset + yy * w + xx] ?? 0;
  return (at(y0, x0) * (1 - tx) + at(y0, x1) * tx) * (1 - ty) + (at(y1, x0) * (1 - tx) + at(y1, x1) * tx) * ty;
}

const toByte = (v: number) => Math.round(Math.min(1, Math.max(0, v)) * 255);

/** `count` frames evenly spaced in time from frame 0 to frame n - 1 of `frames` ([n, 3, h, w]). */
export function interpolateFrames(frames: Float32Array, n: number, h: number, w: number, count: number): Uint8Array {
  const plane = h * w;
  const out = new Uint8Array(count * plane * 3);
  const radius = Math.max(2, Math.round(Math.min(h, w) / 32));
  const lumas = Array.from({ length: n }, (_, i) => luma(frames, i, h, w));
  const fields = new Map<number, Field>();
  const fieldFor = (i: number) => {
    let field = fields.get(i);
    if (!field) {
      field = estimateMotion(lumas[i] as Float32Array, lumas[i + 1] as Float32Array, h, w, radius);
      fields.set(i, field);
    }
    return field;
  };
  for (let j = 0; j < count; j++) {
    const t = count === 1 || n === 1 ? 0 : (j * (n - 1)) / (count - 1);
    const i = Math.min(n - 1, Math.floor(t));
    const f = t - i;
    const target = out.subarray(j * plane * 3, (j + 1) * plane * 3);
    if (f < 1e-6 || i === n - 1) {
      for (let p = 0; p < plane; p++)
        for (let c = 0; c < 3; c++) target[p * 3 + c] = toByte(frames[(i * 3 + c) * plane + p] ?? 0);
      continue;
    }
    const field = fieldFor(i);
    for (let y = 0; y < h; y++)
      for (let x = 0; x < w; x++) {
        const vx = sampleField(field, field.dx, x, y);
        const vy = sampleField(field, field.dy, x, y);
        for (let c = 0; c < 3; c++) {
          const a = bilinear(frames, (i * 3 + c) * plane, h, w, x - f * vx, y - f * vy);
          const b = bilinear(frames, ((i + 1) * 3 + c) * plane, h, w, x + (1 - f) * vx, y + (1 - f) * vy);
          target[(y * w + x) * 3 + c] = toByte((1 - f) * a + f * b);
        }
      }
  }
  return out;
}
