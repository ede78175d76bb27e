#!/usr/bin/env python3
"""Issue 51's benchmark in one command (a sketch of item 6): on one machine, with one generated
models-real repository (UNTRAINED weights), per token setting (resolution) and user count:

  (i)   baseline-http.py self-test   a Python http.server, one video at a time
  (ii)  baseline-batched.py          in-process loop, every user's step batched (and with --graphs,
                                     the same with the denoiser as CUDA graphs)
  (iv)  bench/text-to-video.ts       Galley: the pipeline (the loop in the server) and step by step
                                     (--bench: the command that runs it, e.g. the bundled
                                     `node <carry>/text-to-video-bench.mjs`)

  (iii) baseline-python-backend.py    the loop in one Python-backend model.py (text_to_video_python),
                                     served by Galley over REST (--serve: the command that starts
                                     scripts/serve-http.ts, e.g. `node <carry>/t2v-serve-http.mjs`)
Writes <out>/t2v-real.json (every result) and prints a table with the issue's ratios.

  python3 scripts/real-benchmark.py --out /tmp/t2v-real-out --bench "node carry/text-to-video-bench.mjs" \\
      --serve "node carry/t2v-serve-http.mjs" --config gpu --graphs                                  # the GPU run (full size, FP16)
  python3 scripts/real-benchmark.py --small --resolutions 256x256 --users 1,2 --frames 3 --steps 3 \\
      --bench "npx tsx ../../bench/text-to-video.ts" --serve "npx tsx scripts/serve-http.ts"   # a check on the CPU
  ... --config gpu --kind-cpu                                 # the GPU configs, KIND_CPU (no ONNX Runtime)
"""
import argparse
import importlib.util
import json
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


class GpuSampler:
    """nvidia-smi sampling GPU 0 every 100 ms while a command runs: mean utilisation and peak memory
    used (MiB, the whole card), and the samples themselves (`samples`: [(epoch s, util %, MiB)],
    stamped by nvidia-smi, whose output may reach us in blocks), for `window_costs`. Nothing on a
    machine without nvidia-smi."""

    def __init__(self):
        self.process = None
        self.samples = []
        if shutil.which("nvidia-smi"):
            query = ["nvidia-smi", "--id=0", "--query-gpu=timestamp,utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-lms", "100"]
            self.process = subprocess.Popen(query, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def stop(self):
        if self.process is None:
            return {}
        self.process.terminate()
        text, _ = self.process.communicate(timeout=10)
        self.samples = [sample for sample in map(parse_sample, text.splitlines()) if sample]
        return window_costs(self.samples, None)


def parse_sample(line):
    """One nvidia-smi line, `2026/12/07 10:40:04.107, 35, 5729` (local time): (epoch s, util, MiB), or None."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 3 or not (parts[1].isdigit() and parts[2].isdigit()):
        return None
    try:
        stamp, _, fraction = parts[0].partition(".")
        seconds = time.mktime(time.strptime(stamp, "%Y/%m/%d %H:%M:%S")) + float("0." + (fraction or "0"))
    except ValueError:
        return None
    return (seconds, int(parts[1]), int(parts[2]))


def window_costs(samples, windows):
    """Mean GPU utilisation and peak memory of the samples inside any of `windows` ([[start, end]],
    epoch s; None: every sample). {} when no sample falls inside."""
    inside = [(u, m) for t, u, m in samples if windows is None or any(a <= t <= b for a, b in windows)]
    if not inside:
        return {}
    return {"gpu_util_mean": round(sum(u for u, _ in inside) / len(inside), 1), "gpu_mem_peak_mib": max(m for _, m in inside)}


def children_cpu_s():
    """CPU seconds (user + system) of every child process that has exited and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def tree_cpu_s(root):
    """CPU seconds (user + system) of a running process and its living descendants (Linux /proc)."""
    parents, cpu = {}, {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    total = 0.0
    for pid in cpu:
        p = pid
        while p and p != root:
            p = parents.get(p)
        if p == root:
            total += cpu[pid]
    return total


def run(command, timeout, env=None, required=False):
    """The command's stdout and wall seconds, and what it cost: GPU (nvidia-smi) and host CPU seconds
    of the command and everything it started (its server, the Python stubs). A command that fails or
    runs out of time is reported (run.failures) and measures nothing; the others still run, unless
    this one was required."""
    started = time.time()
    cpu = children_cpu_s()
    gpu = GpuSampler()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
        failure = None if result.returncode == 0 else f"exit {result.returncode}"
        stdout, stderr = result.stdout, result.stderr
    except subprocess.TimeoutExpired as e:
        failure = f"no result in {timeout} s"
        stdout, stderr = "", (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    finally:
        costs = gpu.stop()
    costs["cpu_s"] = round(children_cpu_s() - cpu, 2)
    run.costs = costs
    run.samples = gpu.samples
    seconds = round(time.time() - started, 1)
    if failure:
        sys.stderr.write(stderr[-4000:])
        # What it printed too: a baseline that ran but counted errors says which on stdout.
        sys.stderr.write(stdout[-2000:])
        run.failures.append(
            {"command": shlex.join(command), "failure": failure, "seconds": seconds, "stderr": stderr[-2000:], "stdout": stdout[-2000:]}
        )
        if required:
            raise SystemExit(f"failed ({failure}): {shlex.join(command)}")
        print(f"FAILED ({failure}): {shlex.join(command)}", flush=True)
        return "", seconds
    return stdout, seconds


run.failures = []
run.costs = {}
run.samples = []


def per_user_count(row):
    """A row with the GPU's utilisation and peak memory while its own user count ran (its
    `windows`), beside the whole command's in `commands`."""
    return {**row, **window_costs(run.samples, row.get("windows") or [])}


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def galley_rows(text):
    """The bench's table rows, read by its header's names:
    {(users, mode): {videos_per_min, p50_ms, p95_ms, denoiser_batch, first_step_ms}}."""
    names = {
        "videos/min": "videos_per_min",
        "p50 ms": "p50_ms",
        "p95 ms": "p95_ms",
        "denoiser batch": "denoiser_batch",
        "first step p50 ms": "first_step_ms",
        "CPU ms/video": "cpu_ms_per_video",
    }
    header, rows = None, {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:2] == ["users", "mode"]:
            header = cells
            continue
        if header is None or len(cells) != len(header) or not cells[0].isdigit():
            continue
        row = {}
        for name, cell in zip(header, cells):
            # "median [min–max]": the median; numbers may carry thousands separators.
            m = re.match(r"[\d,.]+", cell)
            if name in names and m and m.group(0).replace(",", "").replace(".", "", 1).isdigit():
                row[names[name]] = float(m.group(0).replace(",", ""))
        rows[(int(cells[0]), cells[1])] = row
    # Each measured run's wall-clock window, as JSON lines after the tables.
    for line in json_lines(text):
        key = (line.get("users"), line.get("mode"))
        if key in rows:
            rows[key]["windows"] = line.get("windows", [])
    return rows


def step_costs(path):
    """Galley's denoising steps in a trace file (Triton's format) of pipeline runs: per video, the time
    its steps took on average (the step period: from its first denoiser call's REQUEST_START to the
    end of its last denoiser or ddim call, over its denoiser calls; steps answered once queued on the
    GPU (`latent_device`) are counted to the last one, whose x0 the loop reads), and per call its
    request (REQUEST_START to REQUEST_END), queue (QUEUE_START to COMPUTE_START) and infer
    (COMPUTE_INPUT_END to COMPUTE_OUTPUT_START); medians in ms. None without such calls."""
    with open(path) as f:
        objects = json.load(f)
    traces = {}
    for o in objects:
        t = traces.setdefault(o["id"], {"model": "", "parent": 0, "stamps": {}})
        if "model_name" in o:
            t["model"], t["parent"] = o["model_name"], o.get("parent_id", 0)
        for stamp in o.get("timestamps", []):
            t["stamps"].setdefault(stamp["name"], stamp["ns"])
    calls = [t for t in traces.values() if t["model"] == "denoiser" and t["parent"]]
    if not calls:
        return None

    def span(t, a, b):
        return (t["stamps"][b] - t["stamps"][a]) / 1e6 if a in t["stamps"] and b in t["stamps"] else None

    def median(values):
        values = sorted(v for v in values if v is not None)
        return round(values[len(values) // 2], 3) if values else None

    by_parent = {}
    for t in traces.values():
        if t["model"] in ("denoiser", "ddim") and t["parent"]:
            by_parent.setdefault(t["parent"], []).append(t)
    periods = []
    for group in by_parent.values():
        starts = [t["stamps"]["REQUEST_START"] for t in group if t["model"] == "denoiser" and "REQUEST_START" in t["stamps"]]
        ends = [t["stamps"]["REQUEST_END"] for t in group if "REQUEST_END" in t["stamps"]]
        if len(starts) >= 2 and ends:
            periods.append((max(ends) - min(starts)) / 1e6 / len(starts))
    return {
        "calls": len(calls),
        "step_period_ms": median(periods),
        "request_ms": median(span(t, "REQUEST_START", "REQUEST_END") for t in calls),
        "queue_ms": median(span(t, "QUEUE_START", "COMPUTE_START") for t in calls),
        "infer_ms": median(span(t, "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START") for t in calls),
    }


def kind_cpu(repo):
    """Every configs/gpu.pbtxt of the (generated) repository with KIND_CPU instead of KIND_GPU."""
    for root, _dirs, files in os.walk(repo):
        for f in files:
            if root.endswith("configs") and f == "gpu.pbtxt":
                path = os.path.join(root, f)
                with open(path) as r:
                    text = r.read()
                with open(path, "w") as w:
                    w.write(text.replace("kind: KIND_GPU", "kind: KIND_CPU"))


def python_backend(args, device, commands):
    """(iii): text_to_video_python written into the repository, served alone, driven per resolution."""
    spec = importlib.util.spec_from_file_location("generate_real_models", os.path.join(HERE, "generate-real-models.py"))
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generator.write_python_model(args.repo)
    if args.kind_cpu:
        kind_cpu(args.repo)
    command = shlex.split(args.serve) + [f"--models={args.repo}", "--load=text_to_video_python", f"--python={args.python}"]
    if args.config:
        command.append(f"--config={args.config}")
    # Its own process group, stopped as a whole (npx or tsx would leave the server behind).
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
    runs = []
    try:
        line = server.stdout.readline()
        if not line.startswith("{"):
            raise SystemExit(f"the server did not start: {shlex.join(command)}")
        url = f"http://127.0.0.1:{json.loads(line)['port']}"
        for resolution in args.resolutions.split(","):
            served = tree_cpu_s(server.pid)
            text, seconds = run(
                [args.python, os.path.join(HERE, "baseline-python-backend.py"), "--url", url, "--users", args.users, "--videos", str(args.videos)]
                + ["--resolution", resolution, "--frames", str(args.frames), "--steps", str(args.steps), "--warmup", str(args.warmup)],
                args.timeout,
            )
            # The clients' CPU and the server's (its stub included) over the same runs.
            costs = {**run.costs, "cpu_s": round(run.costs["cpu_s"] + tree_cpu_s(server.pid) - served, 2)}
            for row in json_lines(text):
                runs.append({"which": "iii", "resolution": resolution, "seconds": seconds, **per_user_count(row)})
            commands.append({"which": "iii", "resolution": resolution, "seconds": seconds, **costs})
            print(f"{resolution} (iii): {seconds} s {json.dumps(costs)}", flush=True)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
        shutil.rmtree(os.path.join(args.repo, "text_to_video_python"), ignore_errors=True)
    return runs


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--repo", default="/tmp/galley-t2v-real", help="where the models are generated (outside the tree: ~1.2 GB)")
    parser.add_argument("--out", default="/tmp/galley-t2v-real-out")
    parser.add_argument("--small", action="store_true", help="the --small models (a CPU check)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--resolutions", default="256x256,512x512,1024x1024", help="256, 1,024, 4,096 tokens with 32 frames")
    parser.add_argument("--users", default="1,4,8,16")
    parser.add_argument("--frames", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--videos", type=int, default=1, help="videos per user, (i) and (iv)")
    parser.add_argument("--graphs", action="store_true", help="also (ii) with the denoiser as CUDA graphs (below 1024x1024)")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="(iv) traces one more run at 1 user: Galley's time per denoising step beside the in-process loop's",
    )
    parser.add_argument(
        "--step-by-step", action="store_true", help="(iv)'s bench also runs its step-by-step client (twice the time; not a baseline of the issue)"
    )
    parser.add_argument("--bench", default=None, help="the command that runs bench/text-to-video.ts (none: (iv) left out)")
    parser.add_argument("--serve", default=None, help="the command that runs scripts/serve-http.ts (none: (iii) left out)")
    parser.add_argument("--config", default=None, help="--model-config-name for Galley (gpu on a GPU)")
    parser.add_argument(
        "--kind-cpu",
        action="store_true",
        help="serve the GPU configs (configs/gpu.pbtxt) with KIND_CPU: a CPU check of the GPU run (no ONNX Runtime needed)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=3,
        help="untimed runs at each user count in every variant first (TorchScript compiles its fusions on a shape's second run)",
    )
    parser.add_argument("--timeout", type=int, default=240, help="seconds per command")
    parser.add_argument(
        "--variants",
        default="i,ii,iii,iv",
        help="which of (i), (ii) (and its graphs with --graphs), (iii), (iv) run: fewer fit a 10-minute device call at 4,096 tokens",
    )
    args = parser.parse_args()
    chosen = set(args.variants.split(","))
    if not chosen or not chosen <= {"i", "ii", "iii", "iv"}:
        sys.exit(f"--variants: a comma-separated list of i, ii, iii, iv, not {args.variants!r}")
    os.makedirs(args.out, exist_ok=True)
    device = ["--device", args.device] if args.device else []
    # runs: one row per variant, resolution and user count; commands: what each command cost as a
    # whole (every user count of one variant and resolution): peak GPU memory, mean utilisation, CPU.
    results = {"untrained": True, "args": vars(args), "runs": [], "commands": [], "failures": run.failures}

    def save():  # after every command: a run cut short by its time limit keeps what it measured
        with open(os.path.join(args.out, "t2v-real.json"), "w") as f:
            json.dump(results, f, indent=2)

    generate = [args.python, os.path.join(HERE, "generate-real-models.py"), "--out", args.repo] + device
    if args.small:
        generate.append("--small")
    text, seconds = run(generate, args.timeout, required=True)
    results["generated"] = json.loads(text)
    print(f"generated {args.repo} in {seconds} s", flush=True)
    shutil.rmtree(os.path.join(args.repo, "text_to_video_python"), ignore_errors=True)  # (iii) only while it runs
    if args.kind_cpu:
        kind_cpu(args.repo)
    for resolution in args.resolutions.split(","):
        common = ["--repo", args.repo, "--resolution", resolution, "--frames", str(args.frames), "--steps", str(args.steps)]
        common += ["--warmup", str(args.warmup)] + device
        variants = [("ii", [args.python, os.path.join(HERE, "baseline-batched.py"), "--users", args.users] + common)]
        # At 4,096 tokens a graph step costs what an eager one does (issue 51's table: 14.2 vs 14.6 ms
        # at batch 1, 117 ms both at 8): (ii) with graphs runs at the smaller settings only.
        h, w = (int(v) for v in resolution.split("x"))
        if args.graphs and h * w < 1024 * 1024:
            variants.append(("ii graphs", variants[0][1] + ["--cuda-graph"]))
        variants.append(
            ("i", [args.python, os.path.join(HERE, "baseline-http.py"), "self-test", "--users", args.users, "--videos", str(args.videos)] + common)
        )
        for name, command in variants:
            if name.split()[0] not in chosen:
                continue
            text, seconds = run(command, args.timeout)
            for row in json_lines(text):
                results["runs"].append({"which": name, "resolution": resolution, "seconds": seconds, **per_user_count(row)})
            results["commands"].append({"which": name, "resolution": resolution, "seconds": seconds, **run.costs})
            print(f"{resolution} ({name}): {seconds} s {json.dumps(run.costs)}", flush=True)
            save()
        if args.bench and "iv" in chosen:
            command = shlex.split(args.bench) + [
                f"--models={args.repo}",
                f"--resolution={resolution}",
                f"--frames={args.frames}",
                f"--steps={args.steps}",
                f"--users={args.users}",
                f"--videos={args.videos}",
                "--reps=1",
                f"--warmups={args.warmup}",
            ]
            if not args.step_by_step:
                command.append("--modes=pipeline")
            if args.config:
                command.append(f"--config={args.config}")
            trace_file = os.path.join(args.out, f"trace-{resolution}.json")
            if args.trace:
                command += [f"--trace={trace_file}", "--trace-users=1"]
            text, seconds = run(command, args.timeout)
            with open(os.path.join(args.out, f"galley-{resolution}.md"), "w") as f:
                f.write(text)
            for (users, mode), row in galley_rows(text).items():
                which = "iv" if mode == "pipeline" else "galley step by step"
                results["runs"].append({"which": which, "resolution": resolution, "users": users, **per_user_count(row)})
            results["commands"].append({"which": "iv", "resolution": resolution, "seconds": seconds, **run.costs})
            print(f"{resolution} (iv): {seconds} s {json.dumps(run.costs)}", flush=True)
            if args.trace and text and os.path.exists(trace_file):
                results.setdefault("steps", {})[resolution] = step_costs(trace_file)
            save()
    if args.serve and "iii" in chosen:
        try:
            results["runs"] += python_backend(args, device, results["commands"])
        except SystemExit as e:
            run.failures.append({"command": "(iii)", "failure": str(e)})
    save()
    # First step: to a video's first denoising step's result ((i): the server's own time to it; (iii)
    # streams nothing before its video).
    # CPU ms/video: the host CPU of a video ((i), (ii): their process; (iv): the server's and its
    # clients'; (iii): per command only, in the second table).
    print(
        "\n| resolution | users | which | videos/min | p50 s | step p50 ms | denoiser batch | first step s | GPU util % | peak GPU MiB | CPU ms/video |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    by = {}
    for r in results["runs"]:
        by[(r["resolution"], r["users"], r["which"])] = r
        p50 = r.get("p50_s", (r.get("p50_ms") or 0) / 1000)
        batch = r.get("average_batch", r.get("denoiser_batch", ""))
        first = r.get("first_step_s", r.get("server_first_step_p50_s"))
        if first is None and r.get("first_step_ms") is not None:
            first = r["first_step_ms"] / 1000
        first = "" if first is None else f"{first:.3f}"
        print(f"| {r['resolution']} | {r['users']} | {r['which']} | {r['videos_per_min']} | {p50:.3f} | {r.get('step_p50_ms', '')} | {batch} | {first} | {r.get('gpu_util_mean', '')} | {r.get('gpu_mem_peak_mib', '')} | {r.get('cpu_ms_per_video', '')} |")
    print("\n| resolution | which (every user count) | seconds | CPU s | mean GPU util % | peak GPU memory MiB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for c in results["commands"]:
        print(f"| {c['resolution']} | {c['which']} | {c['seconds']} | {c.get('cpu_s', '')} | {c.get('gpu_util_mean', '')} | {c.get('gpu_mem_peak_mib', '')} |")
    print()
    for resolution, steps in results.get("steps", {}).items():
        # The in-process loop's step at 1 user (with CUDA graphs where it ran them), the same work.
        own = (by.get((resolution, 1, "ii graphs")) or by.get((resolution, 1, "ii")) or {}).get("step_p50_ms")
        if steps and steps["step_period_ms"] is not None and own:
            added = steps["step_period_ms"] - own
            print(
                f"{resolution}, 1 user, traced: a denoising step every {steps['step_period_ms']} ms against {own} ms in process: "
                f"Galley adds {added:.3f} ms ({100 * added / own:.1f} %; target <= 2 % at 1,024 tokens); "
                f"its denoiser call {steps['request_ms']} ms (queue {steps['queue_ms']}, infer {steps['infer_ms']})"
            )
    for resolution in args.resolutions.split(","):
        for users in (int(u) for u in args.users.split(",")):
            iv, ii, i, iii = (by.get((resolution, users, w)) for w in ("iv", "ii", "i", "iii"))
            if iv and ii and i:
                print(
                    f"{resolution}, {users} users: (iv)/(ii) {iv['videos_per_min'] / ii['videos_per_min']:.2f} (target >= 0.9), "
                    f"(iv)/(i) {iv['videos_per_min'] / i['videos_per_min']:.2f}"
                    + (f", (iv)/(iii) {iv['videos_per_min'] / iii['videos_per_min']:.2f}" if iii else "")
                )


if __name__ == "__main__":
    main()
