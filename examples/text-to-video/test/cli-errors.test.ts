// galley-video's one-line explanations of failed calls. An error streamed by the decoupled
// text_to_video model arrives with its message only (ModelStreamInferResponse.error_message; the
// client sees it as Code.Unknown), so the CLI classifies Triton's message texts and preflight's;
// a unary call (upscale_video) keeps its gRPC code. The texts here are the server's own.
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { explain } from "../src/cli.js";

const URL = "localhost:8001";
const streamed = (message: string) => explain(ConnectError.from(new Error(message)), URL);
const unary = (message: string, code: Code) => explain(new ConnectError(message, code), URL);

describe("explain (streamed errors: a message, no code)", () => {
  it("preflight's refusals are rejections", () => {
    expect(streamed("the prompt is empty: describe the video to make")).toBe(
      "the server rejected the request: the prompt is empty: describe the video to make",
    );
    expect(streamed("resolution '100x100' is not supported; use one of 64x64, 128x128, 256x256")).toMatch(
      /^the server rejected the request: resolution/,
    );
    expect(streamed("frames must be between 1 and 32, not 99")).toMatch(/^the server rejected the request/);
  });

  it("a pipeline model that is not loaded (a GPU model without a GPU) says which", () => {
    expect(streamed("Request for unknown model: 'denoiser' is not found")).toMatch(
      /^the server's pipeline cannot run: its model 'denoiser' is not loaded \(see the server's log/,
    );
    expect(streamed("Request for unknown model: 'vae_decoder' version 1 is not at ready state")).toMatch(
      /its model 'vae_decoder' is not loaded/,
    );
    expect(
      streamed(
        "in ensemble 'upscale_video', step 0 (model 'super_resolution') failed: Request for unknown model: 'super_resolution' has no available versions",
      ),
    ).toMatch(/its model 'super_resolution' is not loaded/);
  });

  it("a busy server, a stopping server, a failing model", () => {
    expect(streamed("Exceeds maximum queue size")).toMatch(/^the server is too busy to take the request now/);
    expect(streamed("Request timeout expired")).toMatch(/^the server is too busy/);
    expect(streamed("[request id: <id_unknown>] request cancelled")).toMatch(/^the server stopped the request/);
    expect(streamed("PyTorch execute failure: The size of tensor a (4) must match")).toBe(
      "the pipeline failed on the server: PyTorch execute failure: The size of tensor a (4) must match",
    );
  });
});

describe("explain (unary calls: with a code)", () => {
  it("no server, no pipeline, a rejected input, shutting down", () => {
    expect(unary("connect ECONNREFUSED 127.0.0.1:8001", Code.Unavailable)).toMatch(
      /^cannot reach a server at localhost:8001 \(connect ECONNREFUSED .*\); start one with\n {2}npx galley serve/,
    );
    expect(unary("Request for unknown model: 'upscale_video' is not found", Code.NotFound)).toMatch(
      /^the server at localhost:8001 has no text-to-video pipeline/,
    );
    expect(unary("[request id: <id_unknown>] unexpected shape for input 'FRAMES'", Code.InvalidArgument)).toMatch(
      /^the server rejected the request/,
    );
    expect(unary("GRPC server is shutting down and has stopped accepting new requests.", Code.Unavailable)).toMatch(
      /^the server stopped the request/,
    );
    expect(unary("Exceeds maximum queue size", Code.Unavailable)).toMatch(/^the server is too busy/);
  });
});
