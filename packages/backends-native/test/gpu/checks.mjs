// The PASS/FAIL bookkeeping the GPU check scripts share: each check is printed as it is decided
// and kept for the script's JSON summary; a step that throws becomes one failed check.

/** `results` (name, ok, detail), `check(name, ok, detail)` and `attempt(name, body)`. */
export function createChecks() {
  const results = [];
  const check = (name, ok, detail = "") => {
    results.push({ name, ok: Boolean(ok), detail });
    console.log(`${ok ? "PASS" : "FAIL"} ${name}${detail ? `: ${detail}` : ""}`);
  };
  const attempt = async (name, body) => {
    try {
      await body();
    } catch (error) {
      check(
        name,
        false,
        String(error?.stack ?? error)
          .split("\n")
          .slice(0, 4)
          .join(" | "),
      );
    }
  };
  return { results, check, attempt };
}

/** Raw little-endian FP32, FP16 or BF16 bytes as numbers (to compare outputs). */
export function values(bytes, datatype) {
  const buffer = new Uint8Array(bytes).slice().buffer;
  if (datatype === "FP32") return new Float32Array(buffer);
  const bits = new Uint16Array(buffer);
  const out = new Float32Array(bits.length);
  if (datatype === "BF16") {
    const word = new Uint32Array(out.buffer);
    for (let i = 0; i < bits.length; i++) word[i] = bits[i] << 16;
    return out;
  }
  for (let i = 0; i < bits.length; i++) {
    const b = bits[i];
    const s = b & 0x8000 ? -1 : 1;
    const e = (b >> 10) & 0x1f;
    const f = b & 0x3ff;
    out[i] =
      e === 0
        ? s * 2 ** -14 * (f / 1024)
        : e === 31
          ? f
            ? Number.NaN
            : s * Infinity
          : s * 2 ** (e - 15) * (1 + f / 1024);
  }
  return out;
}
