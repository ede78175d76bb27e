// Interactive videos before batch jobs at every denoising step (issue 52 item 4): the pipeline's
// denoiser calls carry their request's `priority`, and the denoiser's dynamic batcher has two
// levels (models/denoiser/config.pbtxt: default 2). Twelve videos at once against a batch limit of
// 8: each batch takes the two interactive users' steps first, so their loops run a step a batch
// while the ten batch users share the other six places. Real server (port 0), gRPC streams.
import { createGrpcClient } from "@galley/client";
import type { GalleyServer } from "@galley/server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../src/cli.js";
import { generateVideo } from "../src/video.js";
import { startExampleServer } from "./example-server.js";

let server: GalleyServer;
let url: string;

beforeAll(async () => {
  ({ server, url } = await startExampleServer());
});

afterAll(async () => {
  await server?.close();
});

describe("priority", () => {
  it("finishes the interactive videos' denoising first when twelve share a batch limit of 8", async () => {
    const client = createGrpcClient({ baseUrl: url });
    const steps = 16;
    const users = Array.from({ length: 12 }, (_, i) => ({ interactive: i === 5 || i === 9, denoised: 0 }));
    const started = performance.now();
    await Promise.all(
      users.map((user, i) =>
        generateVideo(
          client,
          {
            prompt: `user ${i}: a lighthouse at dusk`,
            frames: 2,
            steps,
            resolution: "64x64",
            seed: i,
            ...(user.interactive ? { priority: 1 } : {}),
          },
          (p) => {
            if (p.stage === "denoise" && p.step === steps) user.denoised = performance.now() - started;
          },
        ),
      ),
    );
    const order = users
      .map((u, i) => ({ ...u, i }))
      .sort((a, b) => a.denoised - b.denoised)
      .map((u) => (u.interactive ? "I" : "b"));
    expect(users.every((u) => u.denoised > 0)).toBe(true);
    // Both interactive loops end before every batch loop (without the levels they land anywhere).
    expect(order.slice(0, 2)).toEqual(["I", "I"]);
  });

  it("galley-video --priority takes a level of 1 or more", async () => {
    let err = "";
    const code = await runCli(["a fox", "--priority", "0", "-u", url.replace("http://", "")], {
      stdout: { write: () => true, isTTY: false },
      stderr: { write: (t: string) => (err += t) },
    });
    expect(code).toBe(2);
    expect(err).toContain("--priority must be a whole number >= 1, not '0'");
  });
});
