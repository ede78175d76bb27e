import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseServeArgs, UsageError } from "./serve-options.js";

const repo = ["--model-repository", "/models"];
const jobsOf = (args: string[]) => {
  const parsed = parseServeArgs([...repo, ...args]);
  if (parsed === "help") throw new Error("help");
  return parsed.server.jobs;
};

describe("galley serve --videos-api", () => {
  it("is off by default, and its other flags need it", () => {
    expect(jobsOf([])).toBeUndefined();
    expect(jobsOf(["--videos-api=false"])).toBeUndefined();
    expect(() => jobsOf(["--jobs-store", "x.sqlite"])).toThrow(/--jobs-store needs --videos-api=true/);
    expect(() => jobsOf(["--videos-ui=true"])).toThrow(/--videos-ui needs --videos-api=true/);
  });

  it("reads each flag, with the documented defaults", () => {
    expect(jobsOf(["--videos-api=true"])).toEqual({
      concurrency: 2,
      maxQueued: 1000,
      perClient: 0,
      leaseSecs: 30,
      maxAttempts: 2,
      retentionSecs: 86_400,
      allowPrivateWebhooks: false,
      maxEventStreams: 1000,
    });
    const dir = mkdtempSync(join(tmpdir(), "galley-flags-"));
    writeFileSync(join(dir, "keys"), "# comment\n\nkey-number-one-0123\n  key-number-two-0123  \n");
    writeFileSync(join(dir, "secret"), `whsec_${Buffer.alloc(32, 7).toString("base64")}\n`);
    expect(
      jobsOf([
        "--videos-api=on",
        "--jobs-store=postgres://db/jobs",
        `--jobs-dir=${dir}`,
        "--videos-concurrency=4",
        "--videos-max-queued=10",
        "--videos-per-client=1",
        "--videos-lease-secs=10",
        "--videos-max-attempts=3",
        "--videos-retention-secs=60",
        `--videos-api-key-file=${join(dir, "keys")}`,
        `--videos-webhook-secret-file=${join(dir, "secret")}`,
        "--videos-allow-private-webhooks=true",
        "--videos-max-event-streams=5",
        "--videos-ffmpeg=none",
        "--videos-ui=true",
      ]),
    ).toEqual({
      store: "postgres://db/jobs",
      jobsDir: dir,
      concurrency: 4,
      maxQueued: 10,
      perClient: 1,
      leaseSecs: 10,
      maxAttempts: 3,
      retentionSecs: 60,
      apiKeys: ["key-number-one-0123", "key-number-two-0123"],
      webhooks: { secret: `whsec_${Buffer.alloc(32, 7).toString("base64")}` },
      allowPrivateWebhooks: true,
      maxEventStreams: 5,
      ffmpeg: false,
      page: true,
    });
  });

  it("refuses bad values with the flag's name", () => {
    const dir = mkdtempSync(join(tmpdir(), "galley-flags-"));
    writeFileSync(join(dir, "empty"), "# nothing\n");
    writeFileSync(join(dir, "short"), "abc\n");
    writeFileSync(join(dir, "weak"), "whsec_abc\n");
    const cases: [string[], RegExp][] = [
      [["--videos-api=maybe"], /--videos-api/],
      [["--videos-api=true", "--videos-ui=yes please"], /--videos-ui/],
      [["--videos-api=true", "--allow-http=false"], /HTTP port/],
      [["--videos-api=true", "--videos-concurrency=0"], /--videos-concurrency/],
      [["--videos-api=true", "--videos-lease-secs=1"], /--videos-lease-secs/],
      [["--videos-api=true", "--videos-max-queued=-1"], /--videos-max-queued/],
      [["--videos-api=true", `--videos-api-key-file=${join(dir, "missing")}`], /cannot read/],
      [["--videos-api=true", `--videos-api-key-file=${join(dir, "empty")}`], /holds no key/],
      [["--videos-api=true", `--videos-api-key-file=${join(dir, "short")}`], /16 to 512/],
      [["--videos-api=true", `--videos-webhook-secret-file=${join(dir, "weak")}`], /whsec_/],
    ];
    for (const [args, message] of cases) {
      expect(() => jobsOf(args), args.join(" ")).toThrow(UsageError);
      expect(() => jobsOf(args), args.join(" ")).toThrow(message);
    }
  });
});
