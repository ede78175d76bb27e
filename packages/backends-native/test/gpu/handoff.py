"""What it costs the GPU to hand work between two processes (issue 50: a model.py step's floor).

A Python-backend model runs in its own process, with its own CUDA context, and a BLS call's model
runs in the server's: every step of a loop like the DDIM check's crosses from one context to the
other and back, ordered by interprocess events, with no host synchronisation (deferred
completion). This measures that crossing alone, with spin kernels of a fixed length instead of
models, so that the only difference between the rows is where the second kernel runs:

  one stream       both kernels of a step on one stream (the plain-Python loop's shape)
  two streams      the second kernel on another stream of the same process, ordered by events
  two processes    the second kernel in another process, ordered by interprocess events, the
                   handles' records announced over a pipe as the server and a stub announce theirs

The GPU stays the bottleneck in every row (the host runs ahead: a kernel is KERNEL_US, a message
round trip far less), so the time a step takes over the one-stream row is what the crossings cost
the GPU. Run on the lent machine:  python3 handoff.py [--kernel-us 1000] [--steps 400]
"""

import argparse
import time

import torch
import torch.multiprocessing as mp


def spin_cycles(us: float) -> int:
    """Clock cycles for a spin of `us` microseconds, measured (the clock varies by card)."""
    probe = 1_000_000
    torch.cuda._sleep(probe)  # warm
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(probe)
    end.record()
    end.synchronize()
    return int(probe * us / (start.elapsed_time(end) * 1000))


def one_stream(cycles: int, steps: int) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        torch.cuda._sleep(cycles)
        torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def two_streams(cycles: int, steps: int) -> float:
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    a, b = torch.cuda.Event(), torch.cuda.Event()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        with torch.cuda.stream(first):
            first.wait_event(b)
            torch.cuda._sleep(cycles)
            a.record(first)
        with torch.cuda.stream(second):
            second.wait_event(a)
            torch.cuda._sleep(cycles)
            b.record(second)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def peer(conn, cycles: int, steps: int) -> None:
    """The other process: waits for the first's event, spins, records its own, says so."""
    torch.cuda.init()
    mine = torch.cuda.Event(interprocess=True)
    theirs = torch.cuda.Event.from_ipc_handle(torch.cuda.current_device(), conn.recv())
    conn.send(mine.ipc_handle())
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(steps + 1):  # +1: the warm-up step
            conn.recv()
            stream.wait_event(theirs)
            torch.cuda._sleep(cycles)
            mine.record(stream)
            conn.send(1)
    stream.synchronize()
    conn.send("done")


def two_processes(cycles: int, steps: int) -> float:
    here, there = mp.Pipe()
    child = mp.get_context("spawn").Process(target=peer, args=(there, cycles, steps))
    child.start()
    mine = torch.cuda.Event(interprocess=True)
    here.send(mine.ipc_handle())
    theirs = torch.cuda.Event.from_ipc_handle(torch.cuda.current_device(), here.recv())
    stream = torch.cuda.Stream()
    t0 = 0.0
    with torch.cuda.stream(stream):
        for i in range(steps + 1):
            if i > 0:
                stream.wait_event(theirs)
            if i == 1:  # timed from the end of the first step (both processes' streams started)
                stream.synchronize()
                t0 = time.perf_counter()
            torch.cuda._sleep(cycles)
            mine.record(stream)
            here.send(1)
            here.recv()
        stream.wait_event(theirs)
        stream.synchronize()
    elapsed = time.perf_counter() - t0
    if here.recv() != "done":
        raise RuntimeError("the peer process did not finish")
    child.join()
    return elapsed / steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernel-us", type=float, default=1000, help="each of a step's two kernels")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    torch.cuda.init()
    cycles = spin_cycles(args.kernel_us)
    print(f"handoff: {torch.cuda.get_device_name()}, torch {torch.__version__}, two kernels of {args.kernel_us:g} µs a step, {args.steps} steps, median of {args.reps}")
    rows = {}
    for name, run in (("one stream", one_stream), ("two streams", two_streams), ("two processes", two_processes)):
        run(cycles, 20)  # warm
        times = sorted(run(cycles, args.steps) for _ in range(args.reps))
        rows[name] = times[len(times) // 2] * 1e3
    base = rows["one stream"]
    for name, ms in rows.items():
        print(f"handoff: {name:<13} {ms:.3f} ms a step, {1e3 * (ms - base):+.0f} µs over one stream")
    print(f"handoff: two crossings between processes cost the GPU {1e3 * (rows['two processes'] - base):.0f} µs a step")


if __name__ == "__main__":
    main()
