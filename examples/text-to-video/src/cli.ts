// galley-video: make a video from a prompt with the text_to_video pipeline, or upscale and
// interpolate real frames (--input) with upscale_video. Exit codes: 0 done, 1 failed (server
// missing, not a gRPC port, request rejected, the pipeline failed), 2 bad arguments (flags, and the
// files given: checked before the server is asked for anything), 130 cancelled (Ctrl-C).
// Local mistakes are told apart from the server's failures (local-error.ts).
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Code, ConnectError } from "@connectrpc/connect";
import { createGrpcClient } from "@galley/client";
import { API_KEY_ENV, priorityClass, runAsync } from "./async-video.js";
import { readFrames, writePng } from "./frames.js";
import { encodeGif } from "./gif.js";
import { checkInput, checkOut, checkPreviewDir, LocalError } from "./local-error.js";
import { isNotGrpc, notGrpcError } from "./not-grpc.js";
import { createProgress, type ProgressOutput } from "./progress.js";
import { generateVideo, upscaleVideo, type Video } from "./video.js";

export const USAGE = `Usage: galley-video "<prompt>" [options]
       galley-video --input <file.gif | folder of .png> [options]
       galley-video --async "<prompt>" [options]      a job of the server's videos API
       galley-video --async --resume <video id> [options]

  -u, --url <host:port>      the server's gRPC address (default localhost:8001); with --async its
                             HTTP address (default localhost:8000)
  --frames <n>               frames in the video (default 16; with --input: 2n - 1)
  --steps <n>                denoising steps (default 20)
  --resolution <HxW>         output size, one the server supports (default 128x128)
  --seed <n>                 noise seed (default: from the prompt)
  --priority <n>             request priority: 1 interactive, 2 normal, 3 background (default 2)
  --preview-dir <dir>        save a preview PNG every --preview-every steps there
  --preview-every <k>        (default 5)
  --fps <n>                  GIF frame rate (default 8)
  -o, --out <file.gif>       where to write the video (default video.gif)
  -h, --help

  With --async (galley serve --videos-api=true; docs/guides/videos-api.md):
  --async                    submit the video as a job, follow its progress, download the result
                             (-o file.mp4 or file.gif, as the server encodes it; default video.mp4
                             or video.gif); Ctrl-C cancels the job on the server
  --detach                   Ctrl-C leaves the job running (its id is printed: see --resume)
  --resume <video id>        follow and download a video submitted before
  --api-key <key>            the server's API key (default: $${API_KEY_ENV})
  --priority <class>         high, normal or low (or 1, 2, 3); default normal
`;

export interface CliIo {
  stdout: ProgressOutput;
  stderr: { write(text: string): unknown };
  signal?: AbortSignal;
}

class UsageError extends Error {}

function integer(name: string, text: string | undefined, min: number): number | undefined {
  if (text === undefined) return undefined;
  const value = Number(text);
  if (!Number.isInteger(value) || value < min)
    throw new UsageError(`--${name} must be a whole number >= ${min}, not '${text}'`);
  return value;
}

export async function runCli(argv: string[], io: CliIo): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        url: { type: "string", short: "u" },
        frames: { type: "string" },
        steps: { type: "string" },
        resolution: { type: "string" },
        seed: { type: "string" },
        priority: { type: "string" },
        "preview-dir": { type: "string" },
        "preview-every": { type: "string" },
        fps: { type: "string" },
        out: { type: "string", short: "o" },
        input: { type: "string" },
        async: { type: "boolean" },
        detach: { type: "boolean" },
        resume: { type: "string" },
        "api-key": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (error) {
    io.stderr.write(`galley-video: ${(error as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    io.stdout.write(USAGE);
    return 0;
  }
  const asynchronous = values.async === true || values.resume !== undefined;
  const url = String(values.url ?? (asynchronous ? "localhost:8000" : "localhost:8001"));
  const address = /^https?:\/\//.test(url) ? url : `http://${url}`;
  const out = String(values.out ?? "video.gif");
  try {
    if (asynchronous) return await startAsync(values, positionals, address, io);
    for (const flag of ["detach", "api-key"] as const)
      if (values[flag] !== undefined) throw new UsageError(`--${flag} goes with --async`);
    const frames = integer("frames", values.frames as string | undefined, 1);
    const steps = integer("steps", values.steps as string | undefined, 1);
    const seed = integer("seed", values.seed as string | undefined, 0);
    const priority = integer("priority", values.priority as string | undefined, 1);
    const fps = integer("fps", values.fps as string | undefined, 1) ?? 8;
    const previewDir = values["preview-dir"] as string | undefined;
    const previewEvery = integer("preview-every", values["preview-every"] as string | undefined, 1) ?? 5;
    const input = values.input as string | undefined;
    if (!input && positionals.length !== 1) throw new UsageError("give one prompt (in quotes), or --input <frames>");
    if (input && positionals.length > 0) throw new UsageError("give a prompt or --input, not both");
    if (values.resolution !== undefined && !/^\d+x\d+$/.test(String(values.resolution)))
      throw new UsageError(`--resolution must look like 128x128, not '${values.resolution}'`);
    checkOut(out);
    if (previewDir) checkPreviewDir(previewDir);
    if (input) checkInput(input);
    const client = createGrpcClient({ baseUrl: address });
    const started = performance.now();
    const write = (video: Video) => {
      try {
        writeFileSync(out, encodeGif(video, fps));
      } catch (error) {
        throw new LocalError(`cannot write ${out}: ${(error as Error).message}`, 1);
      }
      io.stdout.write(
        `wrote ${out}: ${video.count} frames, ${video.width}x${video.height}, in ${((performance.now() - started) / 1000).toFixed(1)}s\n`,
      );
    };
    if (input) {
      let source: Video;
      try {
        source = readFrames(input);
      } catch (error) {
        throw new LocalError(`--input ${input}: ${(error as Error).message}`);
      }
      if (source.height * source.width > 160 * 160)
        throw new UsageError(
          `${input} is ${source.width}x${source.height}; frames up to 160x160 pixels are upscaled (4x) in reasonable time on a CPU`,
        );
      const count = frames ?? Math.max(1, 2 * source.count - 1);
      io.stdout.write(
        `upscaling ${source.count} frames of ${source.width}x${source.height} to ${count} frames of ${source.width * 4}x${source.height * 4}\n`,
      );
      const progress = createProgress(io.stdout);
      // Frames one by one, then the pairs between them: each stage's steps cost about the same.
      const video = await upscaleVideo(client, source, count, io.signal, (p) =>
        progress.update({
          stage: p.stage,
          step: p.done,
          total: p.total,
          until: p.stage === "upscale" ? source.count : p.total,
        }),
      );
      progress.done();
      write(video);
      return 0;
    }
    const progress = createProgress(io.stdout);
    const video = await generateVideo(
      client,
      {
        prompt: positionals[0] as string,
        ...(frames !== undefined ? { frames } : {}),
        ...(steps !== undefined ? { steps } : {}),
        ...(values.resolution !== undefined ? { resolution: String(values.resolution) } : {}),
        ...(seed !== undefined ? { seed } : {}),
        ...(priority !== undefined ? { priority } : {}),
        ...(previewDir ? { previewEvery } : {}),
        progressIntervalMs: 100, // a bar redrawn 10 times a second; saves the server a response per step
        ...(io.signal ? { signal: io.signal } : {}),
      },
      (p) => {
        // Denoising steps cost the same; decode, upscale and interpolation (after the last of
        // them: total - 2) have no steps to measure, so no ETA is claimed for them.
        progress.update({ stage: p.stage, step: p.step, total: p.total, until: p.total - 2 });
        if (p.preview && previewDir) {
          const file = join(previewDir, `preview-${String(p.step).padStart(4, "0")}.png`);
          try {
            writePng(file, p.preview);
          } catch (error) {
            throw new LocalError(`cannot write the preview ${file}: ${(error as Error).message}`, 1);
          }
        }
      },
    );
    progress.done();
    if (video.blocked) io.stderr.write("galley-video: the server blocked this prompt and answered a default frame\n");
    write(video);
    return 0;
  } catch (error) {
    if (io.signal?.aborted) {
      io.stderr.write("\ngalley-video: cancelled; the server stopped the request\n");
      return 130;
    }
    if (error instanceof UsageError) {
      io.stderr.write(`galley-video: ${error.message}\n\n${USAGE}`);
      return 2;
    }
    let failure = error;
    if (!(failure instanceof LocalError)) {
      const connect = ConnectError.from(error);
      if (isNotGrpc(connect)) failure = await notGrpcError(connect, url, address);
      else {
        io.stderr.write(`galley-video: ${explain(connect, url)}\n`);
        return 1;
      }
    }
    const local = failure as LocalError;
    io.stderr.write(`galley-video: ${local.message}\n`);
    return local.exitCode;
  }
}

/** --async: its arguments checked, then the job run (async-video.ts). */
async function startAsync(
  values: Record<string, string | boolean | undefined>,
  positionals: string[],
  address: string,
  io: CliIo,
): Promise<number> {
  for (const flag of ["input", "fps", "preview-every"] as const)
    if (values[flag] !== undefined) throw new UsageError(`--${flag} does not go with --async`);
  const resume = values.resume as string | undefined;
  if (resume === undefined && positionals.length !== 1) throw new UsageError("give one prompt (in quotes)");
  if (resume !== undefined && positionals.length > 0) throw new UsageError("give a prompt or --resume, not both");
  if (resume !== undefined && !/^video_[0-9a-f]{32}$/.test(resume))
    throw new UsageError(`--resume takes a video id (video_ and 32 hexadecimal digits), not '${resume}'`);
  const resolution = values.resolution as string | undefined;
  const hw = resolution === undefined ? undefined : /^(\d+)x(\d+)$/.exec(resolution);
  if (hw === null) throw new UsageError(`--resolution must look like 128x128, not '${resolution}'`);
  const priorityText = values.priority as string | undefined;
  const priority = priorityText === undefined ? undefined : priorityClass(priorityText);
  if (priorityText !== undefined && priority === undefined)
    throw new UsageError(`--priority must be high, normal or low (or 1, 2, 3), not '${priorityText}'`);
  const out = values.out as string | undefined;
  if (out !== undefined) checkOut(out, [".mp4", ".gif"]);
  const previewDir = values["preview-dir"] as string | undefined;
  if (previewDir) checkPreviewDir(previewDir);
  return runAsync(
    {
      baseUrl: address.replace(/\/+$/, ""),
      apiKey: (values["api-key"] as string | undefined) ?? (process.env[API_KEY_ENV] || undefined),
      prompt: positionals[0],
      resume,
      // --resolution is HxW; the API's size is WxH.
      size: hw ? `${hw[2]}x${hw[1]}` : undefined,
      frames: integer("frames", values.frames as string | undefined, 1),
      steps: integer("steps", values.steps as string | undefined, 1),
      seed: integer("seed", values.seed as string | undefined, 0),
      priority,
      out,
      previewDir,
      detach: values.detach === true,
    },
    io,
  );
}

/**
 * One line for a failed call. A unary call's error has a gRPC code; an error on the stream of a
 * decoupled model has only a message (Triton's ModelStreamInferResponse.error_message: the code
 * stays on the server), so it is classified by Triton's message texts and preflight's own.
 */
export function explain(e: ConnectError, url: string): string {
  const text = e.rawMessage;
  const unknownModel = /Request for unknown model: '([^']+)'/.exec(text)?.[1];
  const stopping = /request cancelled|Server not ready|is unloading|shutting down/i.test(text);
  const busy = /Exceeds maximum queue size|Request timeout expired/.test(text);
  if (e.code === Code.Unavailable && !stopping && !busy && !unknownModel)
    return `cannot reach a server at ${url} (${text}); start one with\n  npx galley serve --model-repository examples/text-to-video/models`;
  if (unknownModel === "text_to_video" || unknownModel === "upscale_video" || e.code === Code.Unimplemented)
    return `the server at ${url} has no text-to-video pipeline: ${text}`;
  if (unknownModel)
    return `the server's pipeline cannot run: its model '${unknownModel}' is not loaded (see the server's log: a model that failed to load, such as a GPU model where there is no GPU): ${text}`;
  if (busy) return `the server is too busy to take the request now, try again later: ${text}`;
  if (stopping) return `the server stopped the request: ${text}`;
  if (
    e.code === Code.InvalidArgument ||
    /^the prompt |is not supported; use one of|must be between \d+ and \d+|unexpected inference (input|output)|unexpected shape/.test(
      text,
    )
  )
    return `the server rejected the request: ${text}`;
  return `the pipeline failed on the server: ${text}`;
}
