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
      0.299 * (frames[base + i] ?? 0) +
      0.587 * (frames[base + plane + i] ?? 0) +
      0.114 * (frames[base + 2 * plane + i] ?? 0);
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
  // Sum of absolute differences between a's block at (x0, y0) and b's displaced by (vx, vy); the
  // caller keeps the displaced block inside the frame, so no pixel needs clamping.
  const sad = (x0: number, y0: number, x1: number, y1: number, vx: number, vy: number) => {
    let sum = 0;
    for (let y = y0; y < y1; y++) {
      let ia = y * w + x0;
      let ib = (y + vy) * w + x0 + vx;
      for (let x = x0; x < x1; x++, ia++, ib++) sum += Math.abs((a[ia] as number) - (b[ib] as number));
    }
    return sum;
  };
  for (let r = 0; r < rows; r++)
    for (let c = 0; c < cols; c++) {
      const x0 = c * BLOCK;
      const y0 = r * BLOCK;
      const x1 = Math.min(x0 + BLOCK, w);
      const y1 = Math.min(y0 + BLOCK, h);
      const still = sad(x0, y0, x1, y1, 0, 0);
      let best = still;
      let bestCost = still;
      let bx = 0;
      let by = 0;
      for (let vy = Math.max(-radius, -y0); vy <= Math.min(radius, h - y1); vy++)
        for (let vx = Math.max(-radius, -x0); vx <= Math.min(radius, w - x1); vx++) {
          if (vx === 0 && vy === 0) continue;
          const s = sad(x0, y0, x1, y1, vx, vy);
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
  const a = r0 * field.cols;
  const b = r1 * field.cols;
  const top = (values[a + c0] as number) * (1 - tx) + (values[a + c1] as number) * tx;
  const bottom = (values[b + c0] as number) * (1 - tx) + (values[b + c1] as number) * tx;
  return top * (1 - ty) + bottom * ty;
}

/** Bilinear sample of one plane (starting at `offset`) at (x, y), clamped to the frame. */
function bilinear(plane: Float32Array, offset: number, h: number, w: number, x: number, y: number): number {
  const cx = x < 0 ? 0 : x > w - 1 ? w - 1 : x;
  const cy = y < 0 ? 0 : y > h - 1 ? h - 1 : y;
  const x0 = cx | 0;
  const y0 = cy | 0;
  const x1 = x0 + 1 < w ? x0 + 1 : x0;
  const y1 = y0 + 1 < h ? y0 + 1 : y0;
  const tx = cx - x0;
  const ty = cy - y0;
  const r0 = offset + y0 * w;
  const r1 = offset + y1 * w;
  const top = (plane[r0 + x0] as number) * (1 - tx) + (plane[r0 + x1] as number) * tx;
  const bottom = (plane[r1 + x0] as number) * (1 - tx) + (plane[r1 + x1] as number) * tx;
  return top * (1 - ty) + bottom * ty;
}

const toByte = (v: number) => Math.round(Math.min(1, Math.max(0, v)) * 255);

/** `count` frames evenly spaced in time from frame 0 to frame n - 1 of `frames` ([n, 3, h, w]). */
export function interpolateFrames(frames: Float32Array, n: number, h: number, w: number, count: number): Uint8Array {
  const plane = h * w;
  const out = new Uint8Array(count * plane * 3);
  const radius = Math.max(2, Math.round(Math.min(h, w) / 32));
  const lumas = Array.from({ length: n }, (_, i) => luma(frames, i, h, w));
  // Per pair of frames: the motion field, interpolated to every pixel once.
  const fields = new Map<number, { vx: Float32Array; vy: Float32Array }>();
  const fieldFor = (i: number) => {
    let dense = fields.get(i);
    if (!dense) {
      const field = estimateMotion(lumas[i] as Float32Array, lumas[i + 1] as Float32Array, h, w, radius);
      dense = { vx: new Float32Array(plane), vy: new Float32Array(plane) };
      for (let y = 0; y < h; y++)
        for (let x = 0; x < w; x++) {
          dense.vx[y * w + x] = sampleField(field, field.dx, x, y);
          dense.vy[y * w + x] = sampleField(field, field.dy, x, y);
        }
      fields.set(i, dense);
    }
    return dense;
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
        const vx = field.vx[y * w + x] as number;
        const vy = field.vy[y * w + x] as number;
        for (let c = 0; c < 3; c++) {
          const a = bilinear(frames, (i * 3 + c) * plane, h, w, x - f * vx, y - f * vy);
          const b = bilinear(frames, ((i + 1) * 3 + c) * plane, h, w, x + (1 - f) * vx, y + (1 - f) * vy);
          target[(y * w + x) * 3 + c] = toByte((1 - f) * a + f * b);
        }
      }
  }
  return out;
}
