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
