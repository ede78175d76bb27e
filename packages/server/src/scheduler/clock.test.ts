import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { systemClock } from "./clock.js";

const after = (delayMs: number) =>
  new Promise<bigint>((resolve) => systemClock.setTimer(() => resolve(systemClock.now()), delayMs));

describe("systemClock timers", () => {
  it("fires each timer once, never before its delay, in deadline order", async () => {
    await after(0); // starting the thread takes milliseconds, which would skew the deadlines below
    const fired: number[] = [];
    const start = systemClock.now();
    const delays = [3, 0.2, 1.5, 0.05, 0.7, 0];
    const ends = await Promise.all(
      delays.map(
        (delay) =>
          new Promise<bigint>((resolve) =>
            systemClock.setTimer(() => {
              fired.push(delay);
              resolve(systemClock.now());
            }, delay),
          ),
      ),
    );
    expect(fired).toEqual([...delays].sort((a, b) => a - b));
    for (const [i, end] of ends.entries()) expect(Number(end - start) / 1e6).toBeGreaterThanOrEqual(delays[i] ?? 0);
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
    const clock = fileURLToPath(new URL("../../dist/scheduler/clock.js", import.meta.url));
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
});
