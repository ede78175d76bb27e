import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { TRACE_TIMESTAMPS } from "../base/trace.js";
import { TraceFiles } from "./trace-files.js";
import { DEFAULT_TRACE_CONFIG, TraceSettings } from "./trace-settings.js";

const dir = mkdtempSync(join(tmpdir(), "galley-trace-settings-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("trace settings' held traces", () => {
  it("are written once they pass the byte limit, whatever log_frequency says (a client may set billions)", async () => {
    const file = join(dir, "held.json");
    const settings = new TraceSettings(
      { ...DEFAULT_TRACE_CONFIG, file, level: TRACE_TIMESTAMPS, rate: 1, logFrequency: 4_000_000_000 },
      new TraceFiles(() => {}),
      1000,
    );
    for (let i = 0; i < 10; i++) {
      const trace = settings.sample("m") as NonNullable<ReturnType<typeof settings.sample>>;
      trace.start("m", 1, `request-${i}`);
      for (const name of ["QUEUE_START", "COMPUTE_START", "COMPUTE_END"]) trace.capture(name);
      trace.capture("REQUEST_END");
      trace.end();
    }
    await settings.close();
    // A file each time 1000 bytes were passed, the rest at shutdown (without the limit: one, at shutdown).
    const files = Array.from({ length: 11 }, (_, n) => n).filter((n) => existsSync(`${file}.${n}`));
    expect(files.length).toBeGreaterThan(2);
    expect(files).toEqual(Array.from({ length: files.length }, (_, n) => n));
    const ids = files.flatMap((n) =>
      (
        JSON.parse(readFileSync(`${file}.${n}`, "utf8").replace(/"ns":(\d+)/g, '"ns":"$1"')) as {
          request_id?: string;
        }[]
      )
        .map((o) => o.request_id)
        .filter((id) => id !== undefined),
    );
    expect(ids).toEqual(Array.from({ length: 10 }, (_, i) => `request-${i}`));
  });
});
