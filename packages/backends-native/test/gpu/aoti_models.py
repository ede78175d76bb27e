#!/usr/bin/env python3
"""torch_aoti on a GPU (issue 49 item 4): the models aoti-gpu.mjs serves, their expected outputs and
Python's own timings. Each model is exported once (torch.export, the batch dynamic from 1 to 8),
compiled by AOTInductor for the device into OUT/<name>.pt2, and scripted into OUT/<name>.pt
(TorchScript of the same module, same weights).

    aoti_models.py make OUT --model NAME [--device cuda] [--small] [--blocks 28]
        OUT/NAME.pt2, OUT/NAME.pt, OUT/NAME.json (inputs, outputs, datatype, compile seconds) and
        OUT/NAME.b1.* / OUT/NAME.b8.*: seeded inputs (.in0, .in1, ...), the exported program's
        outputs run in Python (.ref: `exported.module()`, eager kernels) and the package's outputs
        run in Python (.aoti: torch._inductor.aoti_load_package), raw little-endian bytes
    aoti_models.py time OUT --model NAME [--device cuda] [--seconds 1]
        prints JSON: milliseconds per forward at batch 1 and 8 for eager, TorchScript and the
        package in Python, under torch.inference_mode(): `kernel` with inputs and outputs on the
        device, `e2e` from pinned host memory to host memory

Models (NAME):
    small_fp16, small_bf16   LayerNorm, Linear 64->256, GELU, Linear 256->64: [B, 16, 64]
    small_cpu                the same in FP32 compiled for the CPU (the device-kind check)
    dit_fp16                 a DiT-like stack of pre-norm transformer blocks (width 1152, 16 heads,
                             MLP 4x with tanh GELU, SDPA): [B, 1024, 1152] -> same; --blocks (28)
    denoiser                 the text-to-video example's denoiser (its UNTRAINED weights, read from
                             models/denoiser/1/model.onnx), FP32 as the example serves it: LATENT
                             [B, 8, 4, 16, 16] (8 keyframes of 512x512), TIMESTEP [B, 1],
                             TEXT_EMBEDDING [B, 32, 64]
--small makes dit_fp16 2 blocks of width 128 over 64 tokens and the denoiser 4 keyframes of 8x8
(a check of this script on a CPU).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.fx.experimental._config
import torch.nn.functional as F
from torch import Tensor, nn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "..", ".."))
BATCHES = (1, 8)
DTYPES = {
    "FP32": torch.float32,
    "FP16": torch.float16,
    "BF16": torch.bfloat16,
}


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(64)
        self.up = nn.Linear(64, 256)
        self.down = nn.Linear(256, 64)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Block(nn.Module):
    """A DiT block without its conditioning (adaLN): attention and MLP, each pre-norm, residual."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        # q, k and v apart (DiT fuses them): Inductor's lowering of a select from the fused
        # projection guards the batch to be > 1, and the package would refuse one-row batches.
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(width, width)
        self.v = nn.Linear(width, width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: Tensor) -> Tensor:
        b, n, c = x.shape
        h = self.norm1(x)
        d = c // self.heads
        q = self.q(h).reshape(b, n, self.heads, d).transpose(1, 2)
        k = self.k(h).reshape(b, n, self.heads, d).transpose(1, 2)
        v = self.v(h).reshape(b, n, self.heads, d).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, c))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x)), approximate="tanh"))


class Stack(nn.Module):
    def __init__(self, blocks: int, width: int, heads: int):
        super().__init__()
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(blocks)])

    def forward(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def denoiser() -> nn.Module:
    sys.path.insert(0, os.path.join(ROOT, "examples", "text-to-video", "scripts"))
    import importlib

    export_torchscript = importlib.import_module("export-torchscript")
    return export_torchscript.build("denoiser")


def spec(name: str, small: bool, blocks: int):
    """(module, [(input name, shape without batch, datatype)], output datatype, device kind)."""
    torch.manual_seed(0)
    if name in ("small_fp16", "small_bf16", "small_cpu"):
        dtype = {"small_fp16": "FP16", "small_bf16": "BF16", "small_cpu": "FP32"}[name]
        return Small(), [("x", [16, 64], dtype)], dtype
    if name == "dit_fp16":
        width, heads, tokens = (128, 4, 64) if small else (1152, 16, 1024)
        return Stack(2 if small else blocks, width, heads), [("x", [tokens, width], "FP16")], "FP16"
    if name == "denoiser":
        frames, side = (4, 8) if small else (8, 16)
        inputs = [("LATENT", [frames, 4, side, side], "FP32"), ("TIMESTEP", [1], "FP32"), ("TEXT_EMBEDDING", [32, 64], "FP32")]
        return denoiser(), inputs, "FP32"
    raise ValueError(f"unknown model {name}")


def inputs_for(inputs, batch: int, device: str):
    g = torch.Generator().manual_seed(1234 + batch)
    return [torch.randn([batch, *shape], generator=g).to(DTYPES[dtype]).to(device) for _, shape, dtype in inputs]


def raw(t: Tensor) -> bytes:
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def flat(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


def make(out: str, name: str, device: str, small: bool, blocks: int) -> None:
    os.makedirs(out, exist_ok=True)
    module, inputs, datatype = spec(name, small, blocks)
    target = "cpu" if name == "small_cpu" else device
    dtype = DTYPES[datatype]
    module = module.eval().to(dtype).to(target)
    batch = torch.export.Dim("batch", min=1, max=8)
    example = inputs_for(inputs, 2, target)
    started = time.perf_counter()
    with torch.no_grad(), torch.fx.experimental._config.patch(backed_size_oblivious=True):
        exported = torch.export.export(module, tuple(example), dynamic_shapes=tuple({0: batch} for _ in inputs))
        exported_s = time.perf_counter() - started
        print(f"{name}: batch range {list(exported.range_constraints.values())}", file=sys.stderr)
        torch._inductor.aoti_compile_and_package(exported, package_path=os.path.join(out, f"{name}.pt2"))
    compile_s = time.perf_counter() - started - exported_s
    try:
        scripted = torch.jit.script(module)
    except Exception as error:  # noqa: BLE001 - a module TorchScript cannot script is traced instead
        print(f"{name}: torch.jit.script failed ({str(error).splitlines()[0]}); tracing", file=sys.stderr)
        scripted = torch.jit.trace(module, tuple(example))
    scripted.save(os.path.join(out, f"{name}.pt"))
    package = torch._inductor.aoti_load_package(os.path.join(out, f"{name}.pt2")) if target == device else None
    reference = exported.module()
    outputs = []
    for b in BATCHES:
        xs = inputs_for(inputs, b, target)
        for i, x in enumerate(xs):
            with open(os.path.join(out, f"{name}.b{b}.in{i}"), "wb") as f:
                f.write(raw(x))
        with torch.inference_mode():
            expected = flat(reference(*xs))
            compiled = flat(package(*xs)) if package is not None else expected
        outputs = [{"shape": list(t.shape[1:]), "datatype": datatype} for t in expected]
        for i, (e, c) in enumerate(zip(expected, compiled)):
            with open(os.path.join(out, f"{name}.b{b}.ref{i}"), "wb") as f:
                f.write(raw(e))
            with open(os.path.join(out, f"{name}.b{b}.aoti{i}"), "wb") as f:
                f.write(raw(c))
    info = {
        "name": name,
        "device": target,
        "inputs": [{"name": n, "shape": s, "datatype": d} for n, s, d in inputs],
        "outputs": outputs,
        "parameters": sum(p.numel() for p in module.parameters()),
        "blocks": len(module.blocks) if isinstance(module, Stack) else None,
        "exportSeconds": round(exported_s, 1),
        "compileSeconds": round(compile_s, 1),
        "torch": torch.__version__,
    }
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(info, f, indent=2)
    print(f"{name}: exported in {exported_s:.1f} s, compiled for {target} in {compile_s:.1f} s", file=sys.stderr)


def timed(fn, device: str, seconds: float) -> float:
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for _ in range(5):
        fn()
    sync()
    samples = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(samples) < 10:
        start = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def time_model(out: str, name: str, device: str, seconds: float, small: bool, blocks: int) -> None:
    with open(os.path.join(out, f"{name}.json")) as f:
        info = json.load(f)
    module, inputs, datatype = spec(name, small, info.get("blocks") or blocks)
    runners = {
        "eager": module.eval().to(DTYPES[datatype]).to(device),
        "torchscript": torch.jit.load(os.path.join(out, f"{name}.pt"), map_location=device).eval(),
        "aoti": torch._inductor.aoti_load_package(os.path.join(out, f"{name}.pt2")),
    }
    results = {}
    for label, run in runners.items():
        results[label] = {}
        for b in BATCHES:
            on_device = inputs_for(inputs, b, device)
            host = [x.cpu().pin_memory() if device.startswith("cuda") else x.cpu() for x in on_device]
            with torch.inference_mode():
                kernel = timed(lambda: run(*on_device), device, seconds)
                e2e = timed(
                    lambda: [t.cpu() for t in flat(run(*[x.to(device, non_blocking=True) for x in host]))],
                    device,
                    seconds,
                )
            results[label][str(b)] = {"kernel": kernel, "e2e": e2e}
    name_of = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    print(json.dumps({"torch": torch.__version__, "device": name_of, "model": name, "results": results}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["make", "time"])
    parser.add_argument("out")
    parser.add_argument("--model", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--blocks", type=int, default=28)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    if args.mode == "make":
        make(args.out, args.model, args.device, args.small, args.blocks)
    else:
        time_model(args.out, args.model, args.device, args.seconds, args.small, args.blocks)


if __name__ == "__main__":
    main()
