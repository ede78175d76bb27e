#!/usr/bin/env python3
"""Baseline (i) of issue 51: the loop a team writes first.

A plain Python HTTP service (the standard library's http.server, one request at a time) that runs
one user's video at a time through the text encoder, N denoiser steps at batch 1, the VAE decoder
and (unless --no-upscale) Real-ESRGAN 4x and the frame interpolation, with the same TorchScript
files Galley serves from a generated models-real repository (UNTRAINED weights). Concurrent users
queue in the socket's backlog.

  python3 scripts/baseline-http.py serve --repo models-real --port 8090 [--device cuda]
  python3 scripts/baseline-http.py bench --url http://127.0.0.1:8090 --users 1,4,8,16 --videos 2 \\
      --resolution 256x256 --frames 32 --steps 20
  python3 scripts/baseline-http.py self-test --repo /tmp/t2v-small    # both, in one process (CPU check)

POST /video with JSON {"prompt", "resolution", "frames", "steps", "seed"} answers the video as
uint8 bytes [frames, H, W, 3] (header X-Video-Shape; X-Seconds, X-First-Step-Seconds: the
server's own time for it). `bench` prints one JSON line per user count: videos/min, p50/p95 latency
as the clients saw it, and the server's time to the first step.
"""
import argparse
import json
import os
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "real"))

import torch  # noqa: E402
from pipeline import Models, Request, generate_one  # noqa: E402


class Server(HTTPServer):
    # One video at a time, but every waiting user's connection accepted: socketserver's default
    # backlog of 5 refused connections at 16 users (the 4,096-token run's (i) failed on it).
    request_queue_size = 128


def make_server(models: Models, host: str, port: int) -> HTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):  # quiet
            pass

        def do_POST(self):
            if self.path != "/video":
                self.send_error(404)
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            try:
                request = Request(
                    body["prompt"],
                    body.get("resolution", "256x256"),
                    int(body.get("frames", 32)),
                    int(body.get("steps", 20)),
                    body.get("seed"),
                )
                result = generate_one(models, request)
            except Exception as error:  # a bad request or a failing model: say so, keep serving
                self.send_error(400, str(error))
                return
            video = result["video"]
            data = video.contiguous().cpu().numpy().tobytes() if video.dtype == torch.uint8 else video.float().cpu().numpy().tobytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("X-Video-Shape", ",".join(str(d) for d in video.shape))
            self.send_header("X-Video-Dtype", str(video.dtype).replace("torch.", ""))
            self.send_header("X-Seconds", f"{result['seconds']:.6f}")
            self.send_header("X-First-Step-Seconds", f"{result['first_step_seconds']:.6f}")
            self.end_headers()
            self.wfile.write(data)

    return Server((host, port), Handler)


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def post(url: str, body: bytes):
    with urllib.request.urlopen(urllib.request.Request(f"{url}/video", data=body, method="POST"), timeout=3600) as response:
        return response.read(), response.headers


def bench(url: str, users: int, videos: int, resolution: str, frames: int, steps: int, warmup: int = 1) -> dict:
    # Untimed videos first (TorchScript's first calls of a shape optimize and compile; CUDA's allocator grows).
    for _ in range(warmup):
        post(url, json.dumps({"prompt": "warm-up", "resolution": resolution, "frames": frames, "steps": steps}).encode())
    latencies, first_steps, shapes, errors = [], [], [], []
    lock = threading.Lock()

    def user(index: int):
        for v in range(videos):
            body = json.dumps(
                {"prompt": f"user {index} video {v}: a red fox running in snow", "resolution": resolution, "frames": frames, "steps": steps}
            ).encode()
            started = time.perf_counter()
            try:
                data, headers = post(url, body)
                shape = [int(d) for d in headers["X-Video-Shape"].split(",")]
                first = float(headers["X-First-Step-Seconds"])
            except Exception as error:
                with lock:
                    errors.append(str(error))
                continue
            with lock:
                latencies.append(time.perf_counter() - started)
                first_steps.append(first)
                shapes.append(shape)
                assert len(data) > 0

    window, cpu = time.time(), time.process_time()
    started = time.perf_counter()
    threads = [threading.Thread(target=user, args=(i,)) for i in range(users)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    return {
        # The measured videos' wall-clock window: real-benchmark.py reads the GPU's samples inside it.
        "windows": [[window, time.time()]],
        # The host CPU a video cost: this process's every thread (with `self-test`, the server's too).
        "cpu_ms_per_video": round((time.process_time() - cpu) * 1000 / max(1, len(latencies)), 1),
        "baseline": "i: python http.server, one video at a time",
        "users": users,
        "videos": len(latencies),
        "errors": errors,
        "resolution": resolution,
        "frames": frames,
        "steps": steps,
        "videos_per_min": round(len(latencies) / elapsed * 60, 2),
        "p50_s": round(percentile(latencies, 0.5), 4) if latencies else None,
        "p95_s": round(percentile(latencies, 0.95), 4) if latencies else None,
        "server_first_step_p50_s": round(percentile(first_steps, 0.5), 4) if first_steps else None,
        "video_shape": shapes[0] if shapes else None,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["serve", "bench", "self-test"])
    parser.add_argument("--repo", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models-real"))
    parser.add_argument("--device", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--no-upscale", action="store_true", help="stop at the VAE decoder (no Real-ESRGAN, no interpolation)")
    parser.add_argument("--url", default="http://127.0.0.1:8090")
    parser.add_argument("--users", default="1")
    parser.add_argument("--videos", type=int, default=1, help="videos per user")
    parser.add_argument("--resolution", default="256x256")
    parser.add_argument("--frames", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=1, help="untimed videos before each user count")
    args = parser.parse_args()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.mode in ("serve", "self-test"):
        models = Models(args.repo, device, upscale=not args.no_upscale)
        server = make_server(models, args.host, 0 if args.mode == "self-test" else args.port)
        if args.mode == "serve":
            print(f"baseline (i) serving {args.repo} on http://{args.host}:{server.server_address[1]} ({device})", flush=True)
            server.serve_forever()
            return
        threading.Thread(target=server.serve_forever, daemon=True).start()
        args.url = f"http://{args.host}:{server.server_address[1]}"
    for users in (int(u) for u in args.users.split(",")):
        result = bench(args.url, users, args.videos, args.resolution, args.frames, args.steps, args.warmup)
        result["device"] = device
        print(json.dumps(result), flush=True)
        if result["errors"]:
            sys.exit(1)


if __name__ == "__main__":
    main()
