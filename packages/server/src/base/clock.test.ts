import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { systemClock } from "./clock.js";

const after = (delayMs: number) =>
  new Promise<bigint>((resolve) => systemClock.setTimer(() => resolve(systemClock.now()), delayMs));

describe("systemClock timers", () => {
  it("fires each timer once, never before its delay, in deadline order", async () => {
    await after(0); // starting the thread takes milliseconds, which would skew the deadlines below
    const fired: number[] = [];
    const delays = [3, 0.2, 1.5, 0.05, 0.7, 0];
    // Each deadline lies between the clock read just before and just after its setTimer, plus the
    // delay: on a loaded machine setting six timers can take longer than the gaps between delays.
    const earliest: bigint[] = [];
    const latest: bigint[] = [];
    const ends = await Promise.all(
      delays.map((delay, i) => {
        const ns = BigInt(Math.round(delay * 1e6));
        earliest[i] = systemClock.now() + ns;
        const ended = new Promise<bigint>((resolve) =>
          systemClock.setTimer(() => {
            fired.push(i);
            resolve(systemClock.now());
          }, delay),
        );
        latest[i] = systemClock.now() + ns;
        return ended;
      }),
    );
    expect([...fired].sort()).toEqual(delays.map((_, i) => i));
    for (let k = 1; k < fired.length; k++) {
      const [a, b] = [fired[k - 1] as number, fired[k] as number];
      expect(earliest[a] as bigint, `timer ${a} fired before timer ${b}`).toBeLessThanOrEqual(latest[b] as bigint);
    }
    for (const [i, end] of ends.entries()) expect(end).toBeGreaterThanOrEqual(earliest[i] as bigint);
  });

  it("does not fire a cleared timer, and keeps the others", async () => {
    let cleared = false;
    const handle = systemClock.setTimer(() => {
      cleared = true;
    }, 0.3);
    systemClock.clearTimer(handle);
    await after(2);
    expect(cleared).toBe(false);
  });

  it("accepts timers set from a timer's callback", async () => {
    const start = systemClock.now();
    const end = await new Promise<bigint>((resolve) =>
      systemClock.setTimer(() => systemClock.setTimer(() => resolve(systemClock.now()), 0.4), 0.4),
    );
    expect(Number(end - start) / 1e6).toBeGreaterThanOrEqual(0.8);
  });

  it("fires before its thread is up and never keeps the process alive", () => {
    const clock = fileURLToPath(new URL("../../dist/base/clock.js", import.meta.url));
    const script = `
      import { systemClock } from ${JSON.stringify(clock)};
      systemClock.setTimer(() => console.log("never"), 60_000);
      const start = systemClock.now();
      setTimeout(() => {}, 50); // the loop stays up only this long
      systemClock.setTimer(() => console.log("fired " + String(Number(systemClock.now() - start) >= 200_000)), 0.2);
    `;
    const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
      encoding: "utf8",
      timeout: 20_000,
    });
    expect(child.status).toBe(0);
    expect(child.stdout.trim()).toBe("fired true");
  });

  it("never keeps the process alive after its thread has fired a timer", () => {
    const clock = fileURLToPath(new URL("../../dist/base/clock.js", import.meta.url));
    const script = `
      import { systemClock } from ${JSON.stringify(clock)};
      const keep = setInterval(() => {}, 1000); // the loop stays up until the second timer fires
      systemClock.setTimer(() => {
        console.log("first");
        systemClock.setTimer(() => {
          console.log("second");
          clearInterval(keep);
        }, 20);
      }, 100);
      systemClock.setTimer(() => console.log("never"), 60_000);
    `;
    // From a file: a script given with -e exits even while a port is referenced.
    const folder = mkdtempSync(join(tmpdir(), "galley-clock-"));
    try {
      writeFileSync(join(folder, "script.mjs"), script);
      const child = spawnSync(process.execPath, [join(folder, "script.mjs")], { encoding: "utf8", timeout: 20_000 });
      expect([child.status, child.signal, child.stdout.trim().split("\n")]).toEqual([0, null, ["first", "second"]]);
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });
});
