import { createHash } from "node:crypto";
import { createWriteStream, rmSync } from "node:fs";
import { mkdir, mkdtemp, rm, statfs } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { GetObjectCommand, HeadBucketCommand, ListObjectsV2Command, S3Client } from "@aws-sdk/client-s3";
import { InferenceError } from "../base/errors.js";
import { validateModelName } from "./model-name.js";
import type { ModelCopy, ModelRepository } from "./model-repository.js";
import { objectPath } from "./s3-keys.js";
import { parseS3Location, type S3Location } from "./s3-location.js";

/** What one model in object storage may take; past any of them its load fails before a byte is written. */
export interface S3Limits {
  /** Objects under one model (default 10,000; `GALLEY_S3_MAX_FILES`). */
  maxFiles: number;
  /** Bytes of one model (default 100 GiB; `GALLEY_S3_MAX_MODEL_BYTES`); the copy must also fit the free space. */
  maxModelBytes: number;
  /** Model folders one repository may list (default 100,000). */
  maxModels: number;
}

/** The limits from the environment, the defaults where unset. @throws Error for a value that is not a positive integer. */
export function s3LimitsFromEnv(env: NodeJS.ProcessEnv = process.env): S3Limits {
  const read = (name: string, fallback: number) => {
    const text = env[name];
    if (text === undefined || text === "") return fallback;
    const n = Number(text);
    if (!Number.isSafeInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, not '${text}'`);
    return n;
  };
  return {
    maxFiles: read("GALLEY_S3_MAX_FILES", 10_000),
    maxModelBytes: read("GALLEY_S3_MAX_MODEL_BYTES", 100 * 2 ** 30),
    maxModels: 100_000,
  };
}

/** How long a request to the store may wait to connect, and for the next bytes once connected. */
const CONNECT_TIMEOUT_MS = 10_000;
const IDLE_TIMEOUT_MS = 60_000;
/** Objects downloaded at once. */
const DOWNLOADS = 4;
/** Temporary folders of copies still on disk: removed when the process exits, however it exits. */
const live = new Set<string>();
let exitHook = false;

interface S3Object {
  key: string;
  size: number;
  etag: string;
  modified: string;
}

/**
 * A model repository in S3 or an S3-compatible store (`s3://bucket/path`, or with an endpoint
 * `s3://http://host:port/bucket/path`), read the way Triton reads it: credentials from
 * `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`, else the `AWS_PROFILE` (or
 * default) profile of the AWS credential files, else the SDK's other sources (web identity,
 * instance roles); the region from `AWS_DEFAULT_REGION` (then `AWS_REGION`, else `us-east-1`,
 * following S3's redirects to the bucket's own); path-style addressing. A load downloads the
 * model to a private folder (mode 0700) under `TRITON_AWS_MOUNT_DIRECTORY` or the OS temporary
 * folder; polling compares the objects' keys, sizes, ETags and modification times.
 */
export class S3Repository implements ModelRepository {
  readonly location: string;
  readonly #where: S3Location;
  readonly #client: S3Client;
  readonly #limits: S3Limits;
  readonly #mount: string;

  constructor(location: string, env: NodeJS.ProcessEnv = process.env) {
    this.location = location;
    this.#where = parseS3Location(location);
    this.#limits = s3LimitsFromEnv(env);
    this.#mount = env.TRITON_AWS_MOUNT_DIRECTORY || tmpdir();
    this.#client = new S3Client({
      region: env.AWS_DEFAULT_REGION || env.AWS_REGION || "us-east-1",
      forcePathStyle: true,
      followRegionRedirects: true,
      maxAttempts: 3,
      requestHandler: { connectionTimeout: CONNECT_TIMEOUT_MS, requestTimeout: IDLE_TIMEOUT_MS },
      ...(this.#where.endpoint ? { endpoint: this.#where.endpoint } : {}),
    });
  }

  async check(): Promise<void> {
    try {
      await this.#client.send(new HeadBucketCommand({ Bucket: this.#where.bucket }));
    } catch (error) {
      const { name, message } = described(error);
      throw new Error(
        `Unable to create S3 filesystem client. Check account credentials. Exception: '${name}' Message: '${message}'`,
      );
    }
  }

  async models(): Promise<string[]> {
    const names: string[] = [];
    let token: string | undefined;
    do {
      const page = await this.#list({ Prefix: this.#where.prefix, Delimiter: "/", ContinuationToken: token });
      for (const p of page.CommonPrefixes ?? []) {
        const name = (p.Prefix ?? "").slice(this.#where.prefix.length, -1);
        // A prefix that could not be a model folder (`..`, empty) is not a model.
        if (isModelName(name)) names.push(name);
      }
      if (names.length > this.#limits.maxModels) {
        throw new Error(`${this.location} lists more than ${this.#limits.maxModels} model folders`);
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    return names;
  }

  async fingerprint(name: string): Promise<string> {
    return fingerprintOf(await this.#objects(name));
  }

  async fetch(name: string, signal?: AbortSignal): Promise<ModelCopy> {
    validateModelName(name);
    const objects = await this.#objects(name);
    if (objects.length === 0) throw new Error(`no model folder named '${name}' in ${this.location}`);
    const bytes = objects.reduce((sum, o) => sum + o.size, 0);
    const fail = (detail: string) => new InferenceError("LOAD_FAILED", { model: name, detail });
    if (bytes > this.#limits.maxModelBytes) {
      throw fail(`its objects hold ${bytes} bytes, more than GALLEY_S3_MAX_MODEL_BYTES=${this.#limits.maxModelBytes}`);
    }
    const space = await statfs(this.#mount).catch(() => undefined);
    if (space && bytes > space.bavail * space.bsize) {
      throw fail(
        `its objects hold ${bytes} bytes, more than the ${space.bavail * space.bsize} free where it downloads`,
      );
    }
    const root = await mkdtemp(join(this.#mount, "galley-s3-"));
    track(root);
    const folder = join(root, name);
    const remove = async () => {
      live.delete(root);
      await rm(root, { recursive: true, force: true });
    };
    try {
      await mkdir(folder, { mode: 0o700 });
      const base = `${this.#where.prefix}${name}/`;
      const targets = objects.map((o) => {
        const where = objectPath(folder, o.key.slice(base.length));
        if ("problem" in where) {
          throw fail(`refusing object '${o.key.replaceAll("\0", "\\0")}' of ${this.location}: ${where.problem}`);
        }
        return { object: o, path: where.path };
      });
      const queue = [...targets];
      const worker = async () => {
        for (let t = queue.shift(); t; t = queue.shift()) await this.#download(t.object, t.path, name, signal);
      };
      await Promise.all(Array.from({ length: DOWNLOADS }, worker));
    } catch (error) {
      await remove();
      throw error;
    }
    return { path: folder, fingerprint: fingerprintOf(objects), remove };
  }

  /** One object into the copy: a folder marker becomes a folder; a file is never written twice or past its listed size. */
  async #download(object: S3Object, path: string, model: string, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) throw new InferenceError("LOAD_FAILED", { model, detail: "the load was cancelled" });
    if (object.key.endsWith("/")) {
      await mkdir(path, { recursive: true, mode: 0o700 });
      return;
    }
    await mkdir(join(path, ".."), { recursive: true, mode: 0o700 }).catch((error: NodeJS.ErrnoException) => {
      throw conflict(error, object, model, this.location);
    });
    let body: NodeJS.ReadableStream;
    try {
      const got = await this.#client.send(new GetObjectCommand({ Bucket: this.#where.bucket, Key: object.key }), {
        ...(signal ? { abortSignal: signal } : {}),
      });
      body = got.Body as NodeJS.ReadableStream;
    } catch (error) {
      const { name, message } = described(error);
      throw new InferenceError("LOAD_FAILED", {
        model,
        detail: `Failed to get object at s3://${this.#where.bucket}/${object.key} due to exception: ${name}, error message: ${message}`,
      });
    }
    let written = 0;
    const bounded = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        written += chunk.length;
        if (written > object.size)
          done(new Error(`object '${object.key}' is longer than its listed ${object.size} bytes`));
        else done(null, chunk);
      },
    });
    try {
      await pipeline(body, bounded, createWriteStream(path, { flags: "wx", mode: 0o600 }), signal ? { signal } : {});
    } catch (error) {
      throw conflict(error as NodeJS.ErrnoException, object, model, this.location);
    }
  }

  /** Every object under one model's prefix, in key order, at most `maxFiles`. */
  async #objects(name: string): Promise<S3Object[]> {
    const objects: S3Object[] = [];
    let token: string | undefined;
    do {
      const page = await this.#list({ Prefix: `${this.#where.prefix}${name}/`, ContinuationToken: token });
      for (const o of page.Contents ?? []) {
        objects.push({
          key: o.Key ?? "",
          size: o.Size ?? 0,
          etag: o.ETag ?? "",
          modified: o.LastModified?.toISOString() ?? "",
        });
      }
      if (objects.length > this.#limits.maxFiles) {
        throw new InferenceError("LOAD_FAILED", {
          model: name,
          detail: `it has more than GALLEY_S3_MAX_FILES=${this.#limits.maxFiles} objects in ${this.location}`,
        });
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    return objects.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  async #list(input: { Prefix: string; Delimiter?: string; ContinuationToken?: string | undefined }) {
    try {
      return await this.#client.send(new ListObjectsV2Command({ Bucket: this.#where.bucket, ...input }));
    } catch (error) {
      const { name, message } = described(error);
      throw new Error(
        `Failed to list objects with prefix s3://${this.#where.bucket}/${input.Prefix} due to exception: ${name}, error message: ${message}`,
      );
    }
  }
}

function isModelName(name: string): boolean {
  try {
    validateModelName(name);
    return true;
  } catch {
    return false;
  }
}

function fingerprintOf(objects: readonly S3Object[]): string {
  const hash = createHash("sha256");
  for (const o of objects) hash.update(`${o.key}\0${o.size}\0${o.etag}\0${o.modified}\n`);
  return hash.digest("hex");
}

/** The SDK's error name and message; a HEAD answer has no body, so its status says what happened. */
function described(error: unknown): { name: string; message: string } {
  const e = error as { name?: string; message?: string; $metadata?: { httpStatusCode?: number } };
  const status = e.$metadata?.httpStatusCode;
  if (e.message === "UnknownError" || !e.message) {
    if (status === 404) return { name: "NoSuchBucket", message: "The specified bucket does not exist" };
    if (status === 403) return { name: "AccessDenied", message: "Access Denied" };
  }
  return { name: e.name ?? "Error", message: e.message ?? String(error) };
}

/** A key that is both a file and a folder (`1/model` and `1/model/x`), or one written twice, fails the load by name. */
function conflict(error: NodeJS.ErrnoException, object: S3Object, model: string, location: string): Error {
  if (error.code === "EEXIST" || error.code === "ENOTDIR" || error.code === "EISDIR") {
    return new InferenceError("LOAD_FAILED", {
      model,
      detail: `refusing object '${object.key}' of ${location}: another object already holds its path`,
    });
  }
  return error;
}

function track(root: string): void {
  live.add(root);
  if (exitHook) return;
  exitHook = true;
  process.once("exit", () => {
    for (const folder of live) rmSync(folder, { recursive: true, force: true });
  });
}
