# The text-to-video pipeline in plain Python over a generated models-real repository's TorchScript
# files (the same files Galley serves): what the baselines of issue 51 item 2 run. It mirrors the
# example's text_to_video loop (models/text_to_video/1/model.ts, ddim.ts) and its pre-check: the
# byte tokenizer, the seeded starting noise (the same numbers as the loop's), the DDIM schedule and
# update, keyframes = ceil(frames / 2), the VAE decode and, unless upscale=False, Real-ESRGAN 4x and
# the frame interpolation. The text encoder, denoiser and VAE decoder are UNTRAINED.
import math
import os
import time
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

LATENT_CHANNELS = 4
LATENT_FACTOR = 32  # output pixels per latent pixel: VAE 8x, Real-ESRGAN 4x
TRAIN_STEPS = 1000


def tokenize(prompt: str, length: int = 77) -> List[int]:
    """The example's byte tokenizer: BOS 1, byte b -> b + 3, EOS 2, padded with 0."""
    data = prompt.encode("utf-8")[: length - 2]
    return [1] + [b + 3 for b in data] + [2] + [0] * (length - 2 - len(data))


def fnv1a(text: str) -> int:
    h = 0x811C9DC5
    for b in text.encode("utf-8"):
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def _imul(a: int, b: int) -> int:
    return (a * b) & 0xFFFFFFFF


def noise(seed: int, count: int) -> Tensor:
    """The loop's starting latent: mulberry32 and Box-Muller, the same numbers as model.ts's noise()."""
    state = seed & 0xFFFFFFFF
    out = [0.0] * count

    def random() -> float:
        nonlocal state
        state = (state + 0x6D2B79F5) & 0xFFFFFFFF
        t = state
        t = _imul(t ^ (t >> 15), t | 1)
        t ^= (t + _imul(t ^ (t >> 7), t | 61)) & 0xFFFFFFFF
        return ((t ^ (t >> 14)) & 0xFFFFFFFF) / 4294967296

    for i in range(count):
        u = max(random(), 1e-12)
        out[i] = math.sqrt(-2 * math.log(u)) * math.cos(2 * math.pi * random())
    return torch.tensor(out, dtype=torch.float32)


ALPHA_BAR: List[float] = []
_product = 1.0
for _i in range(TRAIN_STEPS):
    _beta = (math.sqrt(0.00085) + (_i / (TRAIN_STEPS - 1)) * (math.sqrt(0.012) - math.sqrt(0.00085))) ** 2
    _product *= 1 - _beta
    ALPHA_BAR.append(_product)


def timesteps(step: int, steps: int) -> Tuple[int, int]:
    t = ((steps - 1 - step) * TRAIN_STEPS) // steps
    prev = ((steps - 2 - step) * TRAIN_STEPS) // steps if step + 1 < steps else -1
    return t, prev


_TABLES: Dict[torch.device, Tensor] = {}


def ddim_update(latent: Tensor, eps: Tensor, alphas: Tensor) -> Tuple[Tensor, Tensor]:
    """DDIM (eta = 0) for a batch: `alphas` [batch, 2] is alpha-bar at t and at prev (1 after the end).

    Returns the next latent and the clean latent x0 (clamped to +-1.5).
    """
    shape: List[int] = [latent.shape[0]] + [1] * (latent.dim() - 1)
    a = alphas[:, 0].reshape(shape)
    a_prev = alphas[:, 1].reshape(shape)
    x0 = ((latent - (1 - a).sqrt() * eps) / a.sqrt()).clamp(-1.5, 1.5)
    return a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps, x0


def ddim_step(latent: Tensor, eps: Tensor, t: Tensor, prev: Tensor) -> Tuple[Tensor, Tensor]:
    """DDIM (eta = 0) for a batch: `t`, `prev` are [batch] timesteps (prev -1: the end)."""
    table = _TABLES.get(latent.device)
    if table is None:
        table = _TABLES[latent.device] = torch.tensor(ALPHA_BAR + [1.0], dtype=torch.float64, device=latent.device)
    # index -1 is the appended 1.0
    return ddim_update(latent, eps, torch.stack([table[t], table[prev]], 1).float())


class DdimUpdate(torch.nn.Module):
    """The DDIM update as a model (models-real's `ddim`, TorchScript): for a loop whose latents stay
    on the GPU (text_to_video's `latent_device`). LATENT and NOISE_PRED [batch, keyframes, 4, h, w],
    ALPHAS [batch, 2] -> NEXT_LATENT__0, X0__1 like LATENT."""

    def forward(self, LATENT: Tensor, NOISE_PRED: Tensor, ALPHAS: Tensor) -> Tuple[Tensor, Tensor]:
        return ddim_update(LATENT, NOISE_PRED, ALPHAS)


def keyframes(frames: int) -> int:
    return 1 if frames == 1 else max(2, math.ceil(frames / 2))


def parse_resolution(text: str) -> Tuple[int, int]:
    h, w = (int(v) for v in text.split("x"))
    return h, w


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Models:
    """The repository's TorchScript models on one device (loaded once, like a server's instances)."""

    def __init__(self, repo: str, device: str = "cpu", upscale: bool = True):
        self.device = torch.device(device)
        self.upscale = upscale

        def load(name: str) -> torch.jit.ScriptModule:
            module = torch.jit.load(os.path.join(repo, name, "1", "model.pt"), map_location=self.device)
            return module.eval()

        self.text_encoder = load("text_encoder")
        self.denoiser = load("denoiser")
        self.vae_decoder = load("vae_decoder")
        self.super_resolution = load("super_resolution") if upscale else None
        self.frame_interpolation = load("frame_interpolation") if upscale else None

    @torch.no_grad()
    def encode(self, prompts: List[str]) -> Tensor:
        tokens = torch.tensor([tokenize(p) for p in prompts], dtype=torch.int64, device=self.device)
        return self.text_encoder(tokens)

    @torch.no_grad()
    def finish(self, x0: Tensor, frames: int) -> Tensor:
        """One video's clean latent [k, 4, h, w] -> its frames: [k, 3, 8h, 8w] floats, or uint8 [frames, 32h, 32w, 3]."""
        image = self.vae_decoder(x0)
        if self.super_resolution is None or self.frame_interpolation is None:
            return image
        big = self.super_resolution(image)
        return self.frame_interpolation(big, torch.tensor([frames], dtype=torch.int32, device=self.device))


class Request:
    def __init__(self, prompt: str, resolution: str = "256x256", frames: int = 32, steps: int = 20, seed: Optional[int] = None):
        self.prompt = prompt
        self.height, self.width = parse_resolution(resolution)
        self.frames = frames
        self.steps = steps
        self.seed = fnv1a(prompt) if seed is None else seed
        self.k = keyframes(frames)
        self.shape = [self.k, LATENT_CHANNELS, self.height // LATENT_FACTOR, self.width // LATENT_FACTOR]


def generate_one(models: Models, request: Request) -> Dict[str, object]:
    """One user's video, step by step at batch 1 (baseline i's work): the video and its timings."""
    device = models.device
    started = time.perf_counter()
    with torch.no_grad():
        embedding = models.encode([request.prompt])
        latent = noise(request.seed, math.prod(request.shape)).reshape([1] + request.shape).to(device)
        x0 = latent
        first_step = None
        for step in range(request.steps):
            t, prev = timesteps(step, request.steps)
            eps = models.denoiser(latent, torch.full((1, 1), float(t), device=device), embedding)
            latent, x0 = ddim_step(latent, eps, torch.tensor([t], device=device), torch.tensor([prev], device=device))
            if first_step is None:
                sync(device)
                first_step = time.perf_counter() - started
        video = models.finish(x0[0], request.frames)
        sync(device)
    return {"video": video, "seconds": time.perf_counter() - started, "first_step_seconds": first_step}
