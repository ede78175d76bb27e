// `galley serve --videos-api` and the flags of the jobs behind it (docs/guides/videos-api.md).
import { readFileSync } from "node:fs";
import type { JobsOptions } from "../jobs/job-service.js";

/** The flags' parseArgs options. */
export const VIDEOS_OPTIONS = {
  "videos-api": { type: "string" },
  "videos-ui": { type: "string" },
  "jobs-store": { type: "string" },
  "jobs-dir": { type: "string" },
  "videos-concurrency": { type: "string" },
  "videos-max-queued": { type: "string" },
  "videos-per-client": { type: "string" },
  "videos-lease-secs": { type: "string" },
  "videos-max-attempts": { type: "string" },
  "videos-retention-secs": { type: "string" },
  "videos-api-key-file": { type: "string" },
  "videos-webhook-secret-file": { type: "string" },
  "videos-allow-private-webhooks": { type: "string" },
  "videos-max-event-streams": { type: "string" },
  "videos-ffmpeg": { type: "string" },
} as const;

/** The flags' usage lines. */
export const VIDEOS_USAGE = `Videos API (asynchronous jobs on the HTTP port: /v1/videos, docs/guides/videos-api.md)
  --videos-api <bool>            serve /v1/videos and /v1/openapi.json (default: false)
  --videos-ui <bool>             serve a web page for it at /videos (default: false)
  --jobs-store <path|postgres://...>   SQLite file (Node >= 22.13) or a PostgreSQL URL shared by
                                 replicas (default: <jobs-dir>/jobs.sqlite)
  --jobs-dir <path>              outputs go to <path>/outputs/<id>/ (default: ./galley-jobs)
  --videos-concurrency <n>       jobs this server runs at once (default: 2)
  --videos-max-queued <n>        queued jobs past which a create is answered 429 (default: 1000)
  --videos-per-client <n>        one API key's jobs running at once, all servers (default: 0, no limit)
  --videos-lease-secs <n>        a running job not renewed for n s is recovered (default: 30)
  --videos-max-attempts <n>      starts of a job cut short by a crash before it fails (default: 2)
  --videos-retention-secs <n>    finished jobs and their outputs are deleted after n s (default: 86400)
  --videos-api-key-file <path>   API keys, one a line, as 'Authorization: Bearer <key>' (default: none, open)
  --videos-webhook-secret-file <path>   whsec_... secret signing webhooks (or GALLEY_VIDEOS_WEBHOOK_SECRET);
                                 without one, a job's webhook_url is refused
  --videos-allow-private-webhooks <bool>   webhooks may target private and loopback addresses (default: false)
  --videos-max-event-streams <n> open event streams past which one is answered 429 (default: 1000)
  --videos-ffmpeg <path|none>    ffmpeg for MP4 (default: ffmpeg on PATH; none, or no ffmpeg: GIF)
`;

type Values = { [K in keyof typeof VIDEOS_OPTIONS]?: string };

/** Whether this Node has `node:sqlite` (22.13 and later). */
export function hasNodeSqlite(): boolean {
  try {
    return process.getBuiltinModule?.("node:sqlite") !== undefined;
  } catch {
    return false;
  }
}

/**
 * The jobs options the flags give, or undefined when the API is off.
 * @throws Error (a usage error) with the flag and what it expects.
 */
export function readVideosFlags(
  v: Values,
  flags: {
    bool: (flag: string, value: string | undefined, fallback: boolean) => boolean;
    int: (flag: string, value: string | undefined, fallback: number, min: number, max?: number) => number;
  },
  httpOn: boolean,
): JobsOptions | undefined {
  const on = flags.bool("--videos-api", v["videos-api"], false);
  if (!on) {
    const given = Object.keys(VIDEOS_OPTIONS).filter((k) => k !== "videos-api" && v[k as keyof Values] !== undefined);
    if (given.length > 0) throw new Error(`--${given[0]} needs --videos-api=true`);
    return undefined;
  }
  if (!httpOn) throw new Error("--videos-api serves on the HTTP port: it cannot be used with --allow-http=false");
  const store = v["jobs-store"];
  const postgres = store !== undefined && /^postgres(ql)?:\/\//.test(store);
  if (!postgres && !hasNodeSqlite()) {
    throw new Error(
      `--videos-api keeps its jobs in Node's built-in SQLite (node:sqlite, Node 22.13 or later); this is Node ${process.versions.node}: use a newer Node, or --jobs-store postgres://...`,
    );
  }
  const file = (flag: string, path: string): string => {
    try {
      return readFileSync(path, "utf8");
    } catch (error) {
      throw new Error(`${flag}: cannot read '${path}': ${(error as Error).message}`);
    }
  };
  const options: JobsOptions = {
    concurrency: flags.int("--videos-concurrency", v["videos-concurrency"], 2, 1, 1024),
    maxQueued: flags.int("--videos-max-queued", v["videos-max-queued"], 1000, 1),
    perClient: flags.int("--videos-per-client", v["videos-per-client"], 0, 0),
    leaseSecs: flags.int("--videos-lease-secs", v["videos-lease-secs"], 30, 3, 86_400),
    maxAttempts: flags.int("--videos-max-attempts", v["videos-max-attempts"], 2, 1, 100),
    retentionSecs: flags.int("--videos-retention-secs", v["videos-retention-secs"], 86_400, 1, 2 ** 31 - 1),
    allowPrivateWebhooks: flags.bool("--videos-allow-private-webhooks", v["videos-allow-private-webhooks"], false),
    maxEventStreams: flags.int("--videos-max-event-streams", v["videos-max-event-streams"], 1000, 1),
  };
  if (flags.bool("--videos-ui", v["videos-ui"], false)) options.page = true;
  if (store !== undefined) options.store = store;
  if (v["jobs-dir"] !== undefined) options.jobsDir = v["jobs-dir"];
  const ffmpeg = v["videos-ffmpeg"];
  if (ffmpeg !== undefined) options.ffmpeg = ffmpeg === "none" ? false : ffmpeg;
  const keyFile = v["videos-api-key-file"];
  if (keyFile !== undefined) {
    const keys = file("--videos-api-key-file", keyFile)
      .split("\n")
      .map((line) => line.trim())
      .filter((line) => line !== "" && !line.startsWith("#"));
    if (keys.length === 0) throw new Error(`--videos-api-key-file: '${keyFile}' holds no key`);
    const bad = keys.find((key) => !/^[\x21-\x7e]{16,512}$/.test(key));
    if (bad !== undefined) throw new Error("--videos-api-key-file: a key must be 16 to 512 printable ASCII characters");
    options.apiKeys = keys;
  }
  const secretFile = v["videos-webhook-secret-file"];
  const secret =
    secretFile !== undefined
      ? file("--videos-webhook-secret-file", secretFile).trim()
      : process.env.GALLEY_VIDEOS_WEBHOOK_SECRET;
  if (secret !== undefined && secret !== "") {
    if (!/^whsec_[A-Za-z0-9+/]{32,}={0,2}$/.test(secret)) {
      throw new Error("the webhook secret must be whsec_ and at least 24 bytes in base64 (Standard Webhooks)");
    }
    options.webhooks = { secret };
  }
  return options;
}
