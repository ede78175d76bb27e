// The PASS/FAIL bookkeeping the GPU check scripts share: each check is printed as it is decided
// and kept for the script's JSON summary; a step that throws becomes one failed check. Also the
// GPU memory readings (nvidia-smi) several of them report.
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

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

/** Print how many checks passed, write `<name>.json` (results and figures) into `out`, set the exit code. */
export function finishChecks(out, name, results, figures) {
  const failed = results.filter((r) => !r.ok);
  console.log(`${results.length - failed.length}/${results.length} checks passed`);
  writeFileSync(join(out, `${name}.json`), JSON.stringify({ results, figures }, null, 2));
  process.exitCode = failed.length > 0 ? 1 : 0;
}

/** GPU memory in use on `gpu` (MiB, nvidia-smi); NaN where there is none. */
export function gpuMemoryMiB(gpu) {
  try {
    const text = execFileSync(
      "nvidia-smi",
      ["--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", `${gpu}`],
      {
        encoding: "utf8",
      },
    );
    return Number(text.trim());
  } catch {
    return Number.NaN;
  }
}

/**
 * GPU memory (MiB) of each process using a GPU, with the end of its command line (Python stubs are
 * named `triton_python_backend_stub <instance>`); empty where there is no GPU.
 */
export function gpuProcesses() {
  try {
    const text = execFileSync("nvidia-smi", ["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"], {
      encoding: "utf8",
    });
    return text
      .trim()
      .split("\n")
      .filter(Boolean)
      .map((line) => {
        const [pid, mib] = line.split(",").map((v) => v.trim());
        let command = "";
        try {
          command = readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ").trim().slice(-80);
        } catch {}
        return { pid: Number(pid), mib: Number(mib), command };
      });
  } catch {
    return [];
  }
}
