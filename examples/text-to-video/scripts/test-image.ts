// A fixed cartoon-like test image (flat colours, anti-aliased edges: the kind of content the
// anime-video Real-ESRGAN model was trained for), drawn analytically at any size so that a
// high-resolution original and its downscaled copy come from one definition.

/** The image as CHW float32 in [0, 1], drawn with 4×4 supersampling per pixel. */
export function cartoonImage(size: number): Float32Array {
  const out = new Float32Array(3 * size * size);
  const colour = (u: number, v: number): [number, number, number] => {
    // u, v in [0, 1): a sky, a sun, a hill and a house with a window.
    if ((u - 0.72) ** 2 + (v - 0.25) ** 2 < 0.02) return [1, 0.85, 0.2];
    if (v > 0.62 + 0.12 * Math.sin(u * 5)) return [0.2, 0.6, 0.25];
    if (u > 0.18 && u < 0.48 && v > 0.42 && v < 0.72) {
      if (u > 0.26 && u < 0.36 && v > 0.5 && v < 0.6) return [0.15, 0.2, 0.45];
      return [0.85, 0.3, 0.25];
    }
    if (v < 0.42 && v > 0.42 - (0.15 - Math.abs(u - 0.33)) && u > 0.15 && u < 0.51) return [0.45, 0.2, 0.15];
    return [0.55, 0.75, 0.95];
  };
  const samples = 4;
  for (let y = 0; y < size; y++)
    for (let x = 0; x < size; x++) {
      const sum = [0, 0, 0];
      for (let sy = 0; sy < samples; sy++)
        for (let sx = 0; sx < samples; sx++) {
          const c = colour((x + (sx + 0.5) / samples) / size, (y + (sy + 0.5) / samples) / size);
          for (let k = 0; k < 3; k++) sum[k] = (sum[k] ?? 0) + (c[k] ?? 0);
        }
      for (let k = 0; k < 3; k++) out[(k * size + y) * size + x] = (sum[k] ?? 0) / (samples * samples);
    }
  return out;
}
