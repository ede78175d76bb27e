#!/usr/bin/env python3
"""Baseline (ii) of issue 51: the physical limit, one in-process Python loop that batches every
concurrent user's denoising steps.

The users arrive together: their prompts go through the text encoder in one batch, then every
denoising step is one denoiser call over all users' latents (in chunks of --max-batch, the
denoiser config's max_batch_size), the DDIM update batched on the device, then each user's VAE
decode and (unless --no-upscale) Real-ESRGAN 4x and the frame interpolation, all with the same
TorchScript files Galley serves from a generated models-real repository (UNTRAINED weights).
--cuda-graph captures the denoiser call at each chunk's batch size (3 warm-up runs, then
capture; replays after), as Galley's PyTorch backend does with `optimization { cuda { graphs: true } }`.

  python3 scripts/baseline-batched.py --repo models-real --users 1,4,8,16 --resolution 256x256 \\
      --frames 32 --steps 20 [--cuda-graph] [--device cuda]
  python3 scripts/baseline-batched.py --repo /tmp/t2v-small --users 1,2 --frames 3 --steps 4   # CPU check

Prints one JSON line per user count: videos/min, the per-step time (p50, and mean), the
latency of the users' videos (all finish together, but for their decodes), time to the first
step, the average denoiser batch, and peak GPU memory (torch's allocator) on a GPU.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "real"))

import torch  # noqa: E402
from pipeline import Models, Request, ddim_step, noise, sync, timesteps  # noqa: E402


class GraphedDenoiser:
    """The denoiser call at fixed shapes as CUDA graphs: one graph per (batch, latent shape)."""

    def __init__(self, denoiser):
        self.denoiser = denoiser
        self.graphs = {}

    def __call__(self, latent, t, embedding):
        key = (tuple(latent.shape), tuple(embedding.shape))
        entry = self.graphs.get(key)
        if entry is None:
            static = [latent.clone(), t.clone(), embedding.clone()]
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):
                    self.denoiser(*static)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self.denoiser(*static)
            entry = self.graphs[key] = (graph, static, out)
        graph, static, out = entry
        for target, source in zip(static, (latent, t, embedding)):
            target.copy_(source)
        graph.replay()
        return out.clone()


def run(models: Models, users: int, resolution: str, frames: int, steps: int, max_batch: int, graphed) -> dict:
    device = models.device
    requests = [Request(f"user {i}: a red fox running in snow", resolution, frames, steps) for i in range(users)]
    shape = requests[0].shape
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    step_times, batches = [], []
    started = time.perf_counter()
    with torch.no_grad():
        embedding = torch.cat([models.encode([r.prompt for r in requests[i : i + max_batch]]) for i in range(0, users, max_batch)])
        latent = torch.stack([noise(r.seed, math.prod(shape)).reshape(shape) for r in requests]).to(device)
        x0 = latent
        first_step = None
        denoise = graphed or models.denoiser
        for step in range(steps):
            t, prev = timesteps(step, steps)
            sync(device)
            step_started = time.perf_counter()
            eps = []
            for i in range(0, users, max_batch):
                n = min(max_batch, users - i)
                batches.append(n)
                eps.append(denoise(latent[i : i + n], torch.full((n, 1), float(t), device=device), embedding[i : i + n]))
            latent, x0 = ddim_step(
                latent, torch.cat(eps), torch.full((users,), t, device=device), torch.full((users,), prev, device=device)
            )
            sync(device)
            step_times.append(time.perf_counter() - step_started)
            if first_step is None:
                first_step = time.perf_counter() - started
        latencies, shapes = [], []
        for i, r in enumerate(requests):
            video = models.finish(x0[i], r.frames)
            sync(device)
            latencies.append(time.perf_counter() - started)
            shapes.append(list(video.shape))
            assert bool(torch.isfinite(video.float()).all())
    elapsed = time.perf_counter() - started
    ordered = sorted(step_times)
    result = {
        "baseline": "ii: in-process loop, every user's step batched",
        "users": users,
        "resolution": resolution,
        "frames": frames,
        "keyframes": requests[0].k,
        "tokens_per_sample": requests[0].k * (shape[2] // 2) * (shape[3] // 2),
        "steps": steps,
        "cuda_graph": graphed is not None,
        "videos_per_min": round(users / elapsed * 60, 2),
        "step_p50_ms": round(ordered[len(ordered) // 2] * 1000, 3),
        "step_mean_ms": round(sum(step_times) / len(step_times) * 1000, 3),
        "p50_s": round(sorted(latencies)[len(latencies) // 2], 4),
        "p95_s": round(sorted(latencies)[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))], 4),
        "first_step_s": round(first_step, 4),
        "average_batch": round(sum(batches) / len(batches), 2),
        "video_shape": shapes[0],
    }
    if device.type == "cuda":
        result["peak_gpu_memory_bytes"] = torch.cuda.max_memory_allocated(device)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models-real"))
    parser.add_argument("--device", default=None)
    parser.add_argument("--users", default="1,4,8,16")
    parser.add_argument("--resolution", default="256x256")
    parser.add_argument("--frames", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--max-batch", type=int, default=16, help="users per denoiser call (the denoiser's max_batch_size)")
    parser.add_argument("--cuda-graph", action="store_true")
    parser.add_argument("--no-upscale", action="store_true", help="stop at the VAE decoder")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs at each user count first")
    args = parser.parse_args()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.cuda_graph and not device.startswith("cuda"):
        parser.error("--cuda-graph needs a CUDA device")
    models = Models(args.repo, device, upscale=not args.no_upscale)
    graphed = GraphedDenoiser(models.denoiser) if args.cuda_graph else None
    for users in (int(u) for u in args.users.split(",")):
        for _ in range(args.warmup):
            run(models, users, args.resolution, args.frames, min(args.steps, 3), args.max_batch, graphed)
        window, cpu = time.time(), time.process_time()
        result = run(models, users, args.resolution, args.frames, args.steps, args.max_batch, graphed)
        # The measured run's wall-clock window: real-benchmark.py reads the GPU's samples inside it.
        result["windows"] = [[window, time.time()]]
        # The host CPU a video cost (every thread of this process).
        result["cpu_ms_per_video"] = round((time.process_time() - cpu) * 1000 / users, 1)
        result["device"] = device
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
