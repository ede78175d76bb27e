#!/usr/bin/env python3
"""Generate the real-size, UNTRAINED text-to-video model repository (examples/text-to-video/models-real).

The text encoder (T5-base encoder size), the denoiser (DiT-XL/2 size over video latents) and the
VAE decoder (Stable Diffusion VAE decoder size) are built with seeded random weights: they have the
real architectures' sizes and costs, and they are UNTRAINED (the videos are colour noise). Each is
written as TorchScript (torch.jit.script) to <out>/<model>/1/model.pt, FP16 by default, with
`untrained.txt` inside the file and beside it. Real-ESRGAN, the frame interpolation, the tokenizer,
the pre-check and the loop are the example's own: their version folders (and, for the first three
that models-real has no config for, the whole model folder) are copied from ../models at generation
time, so the repository keeps one source of each. (Not symbolic links: Galley, like Triton, scans
only real folders and refuses a model file whose link leads out of the model's folder.)

  python3 scripts/generate-real-models.py                 # full size, FP16, into models-real/
  python3 scripts/generate-real-models.py --small --dtype fp32 --out /tmp/t2v-small   # CPU-sized
  python3 scripts/generate-real-models.py --counts        # parameter counts only (meta device)
  python3 scripts/generate-real-models.py --memory        # peak-memory estimates per batch size
  ... --python-model    # also text_to_video_python, baseline (iii): the loop in one Python-backend model.py

The committed configs (models-real/*/config.pbtxt for the CPU, configs/gpu.pbtxt for
`--model-config-name gpu`) serve either size: the text width is a -1 dimension.
"""
import argparse
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "real"))

import torch  # noqa: E402
from architectures import DIT_NOTE, FULL, LATENT_CHANNELS, PATCH, SMALL, build, init_untrained, parameter_count  # noqa: E402
from pipeline import ALPHA_BAR, DdimUpdate, ddim_step  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.dirname(HERE)
MODELS = os.path.join(EXAMPLE, "models")
MODELS_REAL = os.path.join(EXAMPLE, "models-real")

GENERATED = ["text_encoder", "denoiser", "vae_decoder"]
#: Copied whole (config and version folder) from ../models.
COPIED_WHOLE = ["super_resolution", "frame_interpolation", "upscale_video"]
#: models-real has its own configs; the version folder is copied from ../models.
COPIED_VERSION = ["tokenizer", "preflight", "text_to_video"]
SEEDS = {"text_encoder": 51001, "denoiser": 51002, "vae_decoder": 51003}

#: What the issue expects at full size (parameters), and how far off the count may be.
EXPECTED = {"text_encoder": 110e6, "denoiser": 450e6, "vae_decoder": 50e6}
TOLERANCE = 0.05

#: Token settings: 16 latent frames of s x s latents, patch 2 -> 16 * (s/2)^2 tokens per sample.
SETTINGS = [(8, 256), (16, 1024), (32, 4096)]


def untrained_label(name, scale_name, dtype):
    return (
        f"UNTRAINED: {name} of models-real ({scale_name} size), seeded random weights "
        f"(seed {SEEDS[name]}), {dtype}; written by examples/text-to-video/scripts/generate-real-models.py. "
        "It has a real architecture's size and cost, not its skill: its outputs are noise.\n"
    )


def counts():
    out = {}
    for name in GENERATED:
        full = parameter_count(name, FULL)
        small = parameter_count(name, SMALL)
        expected = EXPECTED[name]
        out[name] = {
            "full": full,
            "small": small,
            "expected": int(expected),
            "within": abs(full - expected) / expected <= TOLERANCE,
        }
    return out


def memory(max_batch=16):
    """Analytic peak GPU memory (bytes) per batch size, FP16, inference (no autograd).

    Weights, plus the largest set of activations alive at once: for the denoiser a block's input,
    its qkv and the MLP hidden layer (SDPA's flash kernel keeps no n x n matrix); for the VAE the
    last level's ResBlock (input, two convolution outputs, a GroupNorm temporary) at 8x resolution,
    per frame, times the frames decoded at once. PyTorch's caching allocator and the CUDA context
    (~0.6 GB) come on top; the measurement on the GPU replaces these figures.
    """
    b2 = 2  # FP16
    s = FULL
    out = {"note": memory.__doc__.strip().split("\n")[0], "weights": {}, "denoiser": {}, "vae_decoder": {}, "text_encoder": {}}
    for name in GENERATED:
        out["weights"][name] = parameter_count(name, s) * b2
    c = s.dit_width
    for latent, tokens in SETTINGS:
        row = {}
        for b in (1, 2, 4, 8, 16, 32):
            if b > max_batch * 2:
                break
            n = b * tokens
            # x, residual, qkv (3c), attention out (c), MLP hidden (4c), gelu out (4c)
            act = n * (c + c + 3 * c + c + 4 * c + 4 * c) * b2
            io = 3 * b * 16 * LATENT_CHANNELS * latent * latent * 4  # FP32 latent in + out + FP16 copy
            row[b] = out["weights"]["denoiser"] + act + io
        out["denoiser"][f"{tokens} tokens ({latent}x{latent} latents)"] = row
    ch = list(reversed(s.vae_channels))
    for latent, tokens in SETTINGS:
        px = (8 * latent) ** 2
        # The last level: 128 channels at 8x; the level before at 4x with 256; the mid block at 1x
        # with 512 and a 1-head attention over latent^2 tokens (SDPA: no n x n matrix kept).
        per_frame = max(4 * ch[3] * px, 4 * ch[2] * px // 4 + ch[2] * px // 4 * 2, 6 * ch[0] * latent * latent) * b2
        row = {f: out["weights"]["vae_decoder"] + f * per_frame for f in (1, 16)}
        out["vae_decoder"][f"{latent}x{latent} latents -> {8 * latent}x{8 * latent}"] = row
    for b in (1, 8, 16):
        out["text_encoder"][b] = out["weights"]["text_encoder"] + b * s.tokens * (6 * s.enc_width + s.enc_ffn) * b2
    return out


def copy_repository(out):
    """The committed configs (when out is not models-real) and the example's reused models."""
    if os.path.abspath(out) != os.path.abspath(MODELS_REAL):
        for root, _dirs, files in os.walk(MODELS_REAL):
            for f in files:
                if not f.endswith(".pbtxt"):
                    continue
                rel = os.path.relpath(os.path.join(root, f), MODELS_REAL)
                os.makedirs(os.path.dirname(os.path.join(out, rel)), exist_ok=True)
                shutil.copyfile(os.path.join(root, f), os.path.join(out, rel))
    for name in COPIED_WHOLE:
        shutil.rmtree(os.path.join(out, name), ignore_errors=True)
        shutil.copytree(os.path.join(MODELS, name), os.path.join(out, name))
    os.makedirs(os.path.join(out, "encode_prompt", "1"), exist_ok=True)
    for name in COPIED_VERSION:
        shutil.rmtree(os.path.join(out, name, "1"), ignore_errors=True)
        shutil.copytree(os.path.join(MODELS, name, "1"), os.path.join(out, name, "1"))


def write_python_model(out):
    """Baseline (iii): text_to_video_python, the whole loop in one Python-backend model.py."""
    folder = os.path.join(out, "text_to_video_python")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.join(folder, "1"))
    os.makedirs(os.path.join(folder, "configs"))
    real = os.path.join(HERE, "real")
    shutil.copyfile(os.path.join(real, "python_model.py"), os.path.join(folder, "1", "model.py"))
    shutil.copyfile(os.path.join(real, "pipeline.py"), os.path.join(folder, "1", "pipeline.py"))
    with open(os.path.join(real, "python_model.pbtxt")) as f:
        config = f.read()
    with open(os.path.join(folder, "config.pbtxt"), "w") as f:
        f.write(config)
    with open(os.path.join(folder, "configs", "gpu.pbtxt"), "w") as f:
        f.write(config.replace("kind: KIND_CPU", "kind: KIND_GPU"))


def sample_inputs(name, s, device, small):
    if name == "text_encoder":
        return (torch.randint(0, 259, (2, s.tokens), device=device),)
    if name == "denoiser":
        # A short check: 2 frames of 8x8 latents (32 tokens); the benchmark runs the real sizes.
        size = 8
        frames = 2
        return (
            torch.randn(1, frames, LATENT_CHANNELS, size, size, device=device),
            torch.full((1, 1), 500.0, device=device),
            torch.randn(1, s.tokens, s.enc_width, device=device),
        )
    size = 8
    return (torch.randn(2, LATENT_CHANNELS, size, size, device=device),)


def write_ddim(out, device):
    """The DDIM update as a TorchScript model (no weights: the same at both sizes), checked against ddim_step."""
    folder = os.path.join(out, "ddim", "1")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.pt")
    torch.jit.save(torch.jit.script(DdimUpdate()), path)
    loaded = torch.jit.load(path, map_location=device)
    generator = torch.Generator().manual_seed(52001)
    latent, eps = (torch.randn(2, 2, LATENT_CHANNELS, 8, 8, generator=generator).to(device) for _ in range(2))
    t, prev = torch.tensor([999, 500], device=device), torch.tensor([500, -1], device=device)
    expected = ddim_step(latent, eps, t, prev)
    table = ALPHA_BAR + [1.0]
    alphas = torch.tensor([[table[999], table[500]], [table[500], table[-1]]], dtype=torch.float32, device=device)
    with torch.no_grad():
        got = loaded(latent, eps, alphas)
    if not all(torch.equal(a, b) for a, b in zip(got, expected)):
        raise SystemExit("ddim: the TorchScript update differs from ddim_step")
    return {"parameters": 0, "bytes": os.path.getsize(path)}


def generate(out, small, dtype_name, device, python_model=False):
    s = SMALL if small else FULL
    scale_name = "small" if small else "full"
    dtype = {"fp16": torch.float16, "fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    os.makedirs(out, exist_ok=True)
    copy_repository(out)
    if python_model:
        write_python_model(out)
    report = {"out": out, "scale": scale_name, "dtype": dtype_name, "device": device, "untrained": True, "models": {}}
    for name in GENERATED:
        started = time.time()
        model = build(name, s)
        init_untrained(model, SEEDS[name])
        model = model.to(dtype).eval()
        scripted = torch.jit.script(model)
        folder = os.path.join(out, name, "1")
        os.makedirs(folder, exist_ok=True)
        label = untrained_label(name, scale_name, dtype_name)
        path = os.path.join(folder, "model.pt")
        torch.jit.save(scripted, path, _extra_files={"untrained.txt": label})
        with open(os.path.join(folder, "untrained.txt"), "w") as f:
            f.write(label)
        # Load the file back on the target device and run it once: finite outputs of the right shape.
        loaded = torch.jit.load(path, map_location=device)
        inputs = sample_inputs(name, s, device, small)
        with torch.no_grad():
            result = loaded(*inputs)
        first = list(inputs[0].shape)
        if name == "text_encoder":
            expected = [first[0], s.tokens, s.enc_width]
        elif name == "denoiser":
            expected = first
        else:
            expected = [first[0], 3, 8 * first[2], 8 * first[3]]
        if list(result.shape) != expected or not bool(torch.isfinite(result).all()):
            raise SystemExit(f"{name}: output {list(result.shape)} (expected {expected}), finite {bool(torch.isfinite(result).all())}")
        report["models"][name] = {
            "parameters": sum(p.numel() for p in model.parameters()),
            "bytes": os.path.getsize(path),
            "seconds": round(time.time() - started, 2),
        }
        del model, scripted, loaded
    report["models"]["ddim"] = write_ddim(out, device)
    with open(os.path.join(out, "UNTRAINED.md"), "w") as f:
        f.write(
            "# UNTRAINED models\n\ntext_encoder, denoiser and vae_decoder here have real architectures' sizes and "
            "seeded random weights (see examples/text-to-video/README.md, \"Real-size models (untrained)\").\n\n"
            f"```json\n{json.dumps(report, indent=2)}\n```\n"
        )
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=MODELS_REAL, help="repository to write (default models-real/)")
    parser.add_argument("--small", action="store_true", help="tiny widths and depths, the same architectures (CPU tests)")
    parser.add_argument("--dtype", choices=["fp16", "bf16", "fp32"], help="weights' dtype (default fp16, fp32 with --small)")
    parser.add_argument("--device", default=None, help="where the check forward runs (default cuda if available, else cpu)")
    parser.add_argument(
        "--python-model",
        action="store_true",
        help="also write text_to_video_python, baseline (iii): the whole loop in one Python-backend model.py",
    )
    parser.add_argument("--counts", action="store_true", help="print parameter counts (meta device) and exit")
    parser.add_argument("--memory", action="store_true", help="print peak-memory estimates per batch size and exit")
    args = parser.parse_args()
    if args.counts or args.memory:
        result = {}
        if args.counts:
            result["parameters"] = counts()
            result["denoiser_note"] = DIT_NOTE
            result["tokens"] = {f"16 frames of {s}x{s} latents, patch {PATCH}": 16 * (s // PATCH) ** 2 for s, _ in SETTINGS}
        if args.memory:
            result["memory_bytes"] = memory()
        print(json.dumps(result, indent=2))
        if args.counts and not all(v["within"] for v in result["parameters"].values()):
            sys.exit(1)
        return
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = args.dtype or ("fp32" if args.small else "fp16")
    print(json.dumps(generate(args.out, args.small, dtype, device, args.python_model), indent=2))


if __name__ == "__main__":
    main()
