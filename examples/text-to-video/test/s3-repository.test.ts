// The pipeline served from an S3-compatible bucket (moto's server, started here on port 0): the
// text-to-video models uploaded as they are in models/, `--model-repository s3://…`, one video
// generated; the downloaded copies are gone once the server closes.
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createGrpcClient } from "@galley/client";
import { createLogger, createServer } from "@galley/server";
import { afterAll, beforeAll, expect, it } from "vitest";
import {
  createBucket,
  type S3Server,
  startS3Server,
  uploadFolder,
} from "../../../packages/server/test/support/s3-server.ts";
import { generateVideo } from "../src/video.js";

let s3: S3Server;
let mount: string;
const saved = { ...process.env };

beforeAll(async () => {
  s3 = await startS3Server();
  mount = mkdtempSync(join(tmpdir(), "galley-t2v-s3-"));
  Object.assign(process.env, s3.env, { TRITON_AWS_MOUNT_DIRECTORY: mount });
  await createBucket(s3, "video");
  await uploadFolder(s3, "video", fileURLToPath(new URL("../models", import.meta.url)), "t2v/models/");
}, 120_000);

afterAll(async () => {
  await s3?.stop();
  process.env = saved;
  rmSync(mount, { recursive: true, force: true });
});

it("serves the pipeline from an s3:// repository", async () => {
  const server = createServer({
    modelRepositories: [`s3://${s3.endpoint}/video/t2v/models`],
    http: false,
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: createLogger({ write: () => {} }),
  });
  try {
    const { grpc, failedModels } = await server.listen();
    expect(failedModels).toEqual([]);
    const client = createGrpcClient({ baseUrl: `http://127.0.0.1:${grpc?.port}` });
    const video = await generateVideo(client, {
      prompt: "a red fox running in snow",
      frames: 5,
      steps: 2,
      resolution: "64x64",
    });
    expect([video.count, video.height, video.width, video.rgb.length]).toEqual([5, 64, 64, 5 * 64 * 64 * 3]);
    expect(readdirSync(mount).length).toBeGreaterThan(0);
  } finally {
    await server.close();
  }
  expect(readdirSync(mount)).toEqual([]);
}, 180_000);
