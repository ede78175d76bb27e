// A real S3-compatible server for the tests: moto's server mode (`moto_server`, Python), on port
// 0. With `auth`, moto checks every request's signature (INITIAL_NO_AUTH_ACTION_COUNT): the three
// IAM calls that make the tests' user and its key pass unsigned, everything after must be signed
// with a key moto knows. (moto 5 then also refuses valid signatures of a query or key holding
// `/` or `\`, as in every model listing, so only the credential tests run with it.) .ci/run
// installs moto when `moto_server` is missing; GALLEY_TEST_MOTO names another one.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import {
  CreateBucketCommand,
  DeleteObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from "@aws-sdk/client-s3";

/** A running moto server and a user allowed everything. */
export interface S3Server {
  /** `http://127.0.0.1:<port>`. */
  endpoint: string;
  accessKeyId: string;
  secretAccessKey: string;
  client: S3Client;
  /** The environment a Galley process reads its credentials from. */
  env: Record<string, string>;
  stop(): Promise<void>;
}

function motoServer(): string {
  const given = process.env.GALLEY_TEST_MOTO;
  if (given) return given;
  try {
    return execFileSync("sh", ["-c", "command -v moto_server"], { encoding: "utf8" }).trim();
  } catch {
    throw new Error("the S3 tests need moto's server (`pip install 'moto[server]'`, or set GALLEY_TEST_MOTO)");
  }
}

/** Start moto on a free port; resolves once it listens (and, with `auth`, the tests' user exists). */
export async function startS3Server(auth = false): Promise<S3Server> {
  const env = { ...process.env };
  delete env.INITIAL_NO_AUTH_ACTION_COUNT;
  const child: ChildProcess = spawn(motoServer(), ["-H", "127.0.0.1", "-p", "0"], {
    env: auth ? { ...env, INITIAL_NO_AUTH_ACTION_COUNT: "3" } : env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const endpoint = await new Promise<string>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk;
      const match = /Running on (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
      if (match?.[1]) resolve(match[1]);
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.once("exit", () => reject(new Error(`moto_server exited; output:\n${output}`)));
    child.once("error", reject);
  });
  // moto tells the service from the credential scope of the Authorization header.
  const iam = async (params: Record<string, string>) => {
    const response = await fetch(endpoint, {
      method: "POST",
      headers: {
        authorization:
          "AWS4-HMAC-SHA256 Credential=setup/20260101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0",
        "content-type": "application/x-www-form-urlencoded",
      },
      body: new URLSearchParams({ Version: "2010-05-08", UserName: "galley", ...params }),
    });
    const text = await response.text();
    if (!response.ok) throw new Error(`moto IAM ${params.Action}: ${text}`);
    return text;
  };
  await iam({ Action: "CreateUser" });
  const key = await iam({ Action: "CreateAccessKey" });
  await iam({
    Action: "PutUserPolicy",
    PolicyName: "all",
    PolicyDocument: JSON.stringify({
      Version: "2012-10-17",
      Statement: [{ Effect: "Allow", Action: "*", Resource: "*" }],
    }),
  });
  const accessKeyId = /<AccessKeyId>([^<]+)/.exec(key)?.[1] ?? "";
  const secretAccessKey = /<SecretAccessKey>([^<]+)/.exec(key)?.[1] ?? "";
  const client = new S3Client({
    endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: { accessKeyId, secretAccessKey },
  });
  return {
    endpoint,
    accessKeyId,
    secretAccessKey,
    client,
    env: { AWS_ACCESS_KEY_ID: accessKeyId, AWS_SECRET_ACCESS_KEY: secretAccessKey, AWS_DEFAULT_REGION: "us-east-1" },
    async stop() {
      client.destroy();
      if (child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
    },
  };
}

/** Make a bucket. */
export async function createBucket(s3: S3Server, bucket: string): Promise<void> {
  await s3.client.send(new CreateBucketCommand({ Bucket: bucket }));
}

/** Upload every file under `folder` as `<prefix><path>`. */
export async function uploadFolder(s3: S3Server, bucket: string, folder: string, prefix: string): Promise<void> {
  const walk = (dir: string): string[] =>
    readdirSync(dir).flatMap((name) => {
      const path = join(dir, name);
      return statSync(path).isDirectory() ? walk(path) : [path];
    });
  for (const file of walk(folder)) {
    await putObject(s3, bucket, `${prefix}${relative(folder, file)}`, readFileSync(file));
  }
}

/** Write one object. */
export async function putObject(s3: S3Server, bucket: string, key: string, body: Uint8Array | string): Promise<void> {
  await s3.client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
}

/** Delete every object under `prefix`. */
export async function deletePrefix(s3: S3Server, bucket: string, prefix: string): Promise<void> {
  const listed = await s3.client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix }));
  for (const o of listed.Contents ?? []) await s3.client.send(new DeleteObjectCommand({ Bucket: bucket, Key: o.Key }));
}
