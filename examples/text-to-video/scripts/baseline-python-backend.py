#!/usr/bin/env python3
"""Baseline (iii) of issue 51's client: users asking Galley's text_to_video_python (the whole loop in
one Python-backend model.py; generate-real-models.py --python-model writes it) for videos over
KServe v2 REST, the video coming back as binary data (Triton's binary tensor extension).

  python3 scripts/generate-real-models.py --python-model
  npx galley serve --model-repository examples/text-to-video/models-real --model-config-name gpu
  python3 scripts/baseline-python-backend.py --url http://127.0.0.1:8000 --users 1,4,8,16 \\
      --resolution 256x256 --frames 32 --steps 20

Prints one JSON line per user count: videos/min and p50/p95 latency as the clients saw them.
"""
import argparse
import json
import sys
import threading
import time
import urllib.request


def infer(url, model, prompt, resolution, frames, steps, seed=None):
    """One video: (shape, bytes)."""
    inputs = [
        {"name": "PROMPT", "shape": [1], "datatype": "BYTES", "data": [prompt]},
        {"name": "RESOLUTION", "shape": [1], "datatype": "BYTES", "data": [resolution]},
        {"name": "FRAMES", "shape": [1], "datatype": "INT32", "data": [frames]},
        {"name": "STEPS", "shape": [1], "datatype": "INT32", "data": [steps]},
    ]
    if seed is not None:
        inputs.append({"name": "SEED", "shape": [1], "datatype": "INT32", "data": [seed]})
    body = json.dumps({"inputs": inputs, "outputs": [{"name": "VIDEO", "parameters": {"binary_data": True}}]}).encode()
    request = urllib.request.Request(
        f"{url}/v2/models/{model}/infer", data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=3600) as response:
        data = response.read()
        length = int(response.headers.get("Inference-Header-Content-Length", len(data)))
    header = json.loads(data[:length])
    output = header["outputs"][0]
    return output["shape"], data[length:]


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--model", default="text_to_video_python")
    parser.add_argument("--users", default="1")
    parser.add_argument("--videos", type=int, default=1, help="videos per user")
    parser.add_argument("--resolution", default="256x256")
    parser.add_argument("--frames", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=1, help="untimed videos before each user count")
    args = parser.parse_args()
    for users in (int(u) for u in args.users.split(",")):
        for _ in range(args.warmup):
            infer(args.url, args.model, "warm-up", args.resolution, args.frames, args.steps)
        latencies, shapes, errors = [], [], []
        lock = threading.Lock()

        def user(index):
            for v in range(args.videos):
                started = time.perf_counter()
                try:
                    shape, data = infer(
                        args.url, args.model, f"user {index} video {v}: a red fox running in snow", args.resolution, args.frames, args.steps
                    )
                    assert len(data) == shape[0] * shape[1] * shape[2] * shape[3]
                except Exception as error:
                    with lock:
                        errors.append(str(error))
                    continue
                with lock:
                    latencies.append(time.perf_counter() - started)
                    shapes.append(shape)

        window = time.time()
        started = time.perf_counter()
        threads = [threading.Thread(target=user, args=(i,)) for i in range(users)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        print(
            json.dumps(
                {
                    # The measured videos' wall-clock window: real-benchmark.py reads the GPU's samples inside it.
                    "windows": [[window, time.time()]],
                    "baseline": "iii: the loop in one Python-backend model.py, served by Galley",
                    "users": users,
                    "videos": len(latencies),
                    "errors": errors,
                    "resolution": args.resolution,
                    "frames": args.frames,
                    "steps": args.steps,
                    "videos_per_min": round(len(latencies) / elapsed * 60, 2),
                    "p50_s": round(percentile(latencies, 0.5), 4) if latencies else None,
                    "p95_s": round(percentile(latencies, 0.95), 4) if latencies else None,
                    "video_shape": shapes[0] if shapes else None,
                }
            ),
            flush=True,
        )
        if errors:
            sys.exit(1)


if __name__ == "__main__":
    main()
