# Real-size architectures for the text-to-video example's models-real/ repository, with UNTRAINED
# weights (seeded random numbers: the videos are noise-like colour fields, not what the prompt
# says). Scriptable with torch.jit.script, batch, frame and spatial sizes dynamic.
#
#   TextEncoder  T5-base encoder size: 12 layers, width 768, 12 heads, FFN 3072 (ReLU), RMSNorm,
#                no biases, T5's bucketed relative position bias (shared by the layers), 77 tokens.
#   Denoiser     DiT-XL/2 size over video latents: 28 blocks, width 1152, 16 heads, MLP 4608, patch
#                2x2 per frame, full attention over every frame's tokens (SDPA), adaLN-zero
#                modulation from one conditioning vector (timestep + pooled text), computed once
#                for all blocks with a per-block table (PixArt-alpha's "adaLN-single"): see
#                DIT_NOTE below for why, and what that does to the parameter count.
#   VaeDecoder   Stable Diffusion VAE decoder size: channels 512/512/256/128, 3 ResNet blocks per
#                level, a self-attention mid block, 4 latent channels, 8x upsampling, per frame.
#
# Every module takes and returns FP32 tensors (the example's interface, which the text_to_video
# loop and the clients speak) and computes in the dtype its weights have (FP16 on the GPU).
import math
from dataclasses import dataclass
from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

DIT_NOTE = (
    "DiT-XL/2 as published (per-block adaLN MLPs) has 675 M parameters; 28 transformer blocks of "
    "width 1152 without them have 446 M. This denoiser computes the per-block shift/scale/gate "
    "from one shared projection plus a learned per-block table (adaLN-single, PixArt-alpha), so its "
    "blocks are the 446 M and its per-step compute is DiT-XL/2's (the modulation is one vector per "
    "sample, negligible work)."
)


@dataclass
class Scale:
    """Widths and depths of the three models; FULL is the real size, SMALL a CPU-sized copy."""

    vocab: int
    tokens: int
    enc_width: int
    enc_layers: int
    enc_heads: int
    enc_ffn: int
    dit_width: int
    dit_blocks: int
    dit_heads: int
    vae_channels: Tuple[int, int, int, int]
    vae_groups: int
    vae_layers: int


FULL = Scale(
    vocab=32128,
    tokens=77,
    enc_width=768,
    enc_layers=12,
    enc_heads=12,
    enc_ffn=3072,
    dit_width=1152,
    dit_blocks=28,
    dit_heads=16,
    vae_channels=(128, 256, 512, 512),
    vae_groups=32,
    vae_layers=2,
)

SMALL = Scale(
    vocab=512,
    tokens=77,
    enc_width=64,
    enc_layers=2,
    enc_heads=4,
    enc_ffn=128,
    dit_width=64,
    dit_blocks=2,
    dit_heads=4,
    vae_channels=(16, 16, 32, 32),
    vae_groups=8,
    vae_layers=1,
)

LATENT_CHANNELS = 4
PATCH = 2
#: Stable Diffusion's latent scaling: the decoder sees latent / 0.18215.
VAE_SCALE = 0.18215


# ---------------------------------------------------------------------------------------------
# Text encoder (T5-base encoder size)


class RMSNorm(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: Tensor) -> Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(variance + 1e-6)).to(x.dtype)


def t5_buckets(length: int, buckets: int = 32, max_distance: int = 128) -> Tensor:
    """T5's bidirectional relative position buckets, [length, length]."""
    position = torch.arange(length)
    relative = position[None, :] - position[:, None]
    half = buckets // 2
    out = (relative > 0).long() * half
    distance = relative.abs()
    exact = half // 2
    large = exact + (
        torch.log(distance.float().clamp(min=1) / exact) / math.log(max_distance / exact) * (half - exact)
    ).long()
    large = large.clamp(max=half - 1)
    return out + torch.where(distance < exact, distance, large)


class EncoderLayer(nn.Module):
    def __init__(self, width: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.norm1 = RMSNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.norm2 = RMSNorm(width)
        self.wi = nn.Linear(width, ffn, bias=False)
        self.wo = nn.Linear(ffn, width, bias=False)

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        b, n, c = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        # T5 does not scale by 1/sqrt(d); SDPA's scale=1.0 would say so, but the additive bias is
        # what matters here: keep SDPA's default scale (the weights are untrained either way).
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = x + self.out(a.transpose(1, 2).reshape(b, n, c))
        return x + self.wo(F.relu(self.wi(self.norm2(x))))


class TextEncoder(nn.Module):
    """TOKENS [batch, 77] int64 -> EMBEDDING [batch, 77, width] float32."""

    def __init__(self, s: Scale):
        super().__init__()
        self.embed = nn.Embedding(s.vocab, s.enc_width)
        self.relative = nn.Embedding(32, s.enc_heads)
        self.register_buffer("buckets", t5_buckets(s.tokens), persistent=True)
        self.layers = nn.ModuleList([EncoderLayer(s.enc_width, s.enc_heads, s.enc_ffn) for _ in range(s.enc_layers)])
        self.norm = RMSNorm(s.enc_width)
        self.vocab = s.vocab

    def forward(self, TOKENS: Tensor) -> Tensor:
        x = self.embed(TOKENS.clamp(0, self.vocab - 1))
        # [1, heads, n, n], shared by every layer (as T5 shares the first layer's).
        bias = self.relative(self.buckets).permute(2, 0, 1).unsqueeze(0).to(x.dtype)
        for layer in self.layers:
            x = layer(x, bias)
        return self.norm(x).float()


# ---------------------------------------------------------------------------------------------
# Denoiser (DiT-XL/2 size)


def sincos(positions: Tensor, width: int) -> Tensor:
    """Sinusoidal features of `positions` (any float tensor), [..., width]."""
    half = width // 2
    freqs = torch.exp(
        -math.log(10000.0) * torch.arange(half, device=positions.device, dtype=torch.float32) / half
    )
    angles = positions.float().unsqueeze(-1) * freqs
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


class DiTBlock(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)
        # adaLN-single: this block's learned offsets to the shared modulation.
        self.table = nn.Parameter(torch.zeros(6, width))

    def forward(self, x: Tensor, modulation: Tensor) -> Tensor:
        b, n, c = x.shape
        mod = (modulation.reshape(b, 6, c) + self.table).unsqueeze(2)  # [b, 6, 1, c]
        shift1, scale1, gate1 = mod[:, 0], mod[:, 1], mod[:, 2]
        shift2, scale2, gate2 = mod[:, 3], mod[:, 4], mod[:, 5]
        h = self.norm1(x) * (1 + scale1) + shift1
        qkv = self.qkv(h).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + gate1 * self.proj(a.transpose(1, 2).reshape(b, n, c))
        h = self.norm2(x) * (1 + scale2) + shift2
        return x + gate2 * self.fc2(F.gelu(self.fc1(h), approximate="tanh"))


class Denoiser(nn.Module):
    """LATENT [b, frames, 4, h, w], TIMESTEP [b, 1], TEXT_EMBEDDING [b, 77, text width] -> NOISE_PRED like LATENT."""

    def __init__(self, s: Scale):
        super().__init__()
        c = s.dit_width
        self.width = c
        self.p = PATCH
        self.lc = LATENT_CHANNELS
        self.patch = nn.Conv2d(LATENT_CHANNELS, c, kernel_size=PATCH, stride=PATCH)
        self.time1 = nn.Linear(256, c)
        self.time2 = nn.Linear(c, c)
        self.text = nn.Linear(s.enc_width, c)
        self.adaln = nn.Linear(c, 6 * c)
        self.blocks = nn.ModuleList([DiTBlock(c, s.dit_heads) for _ in range(s.dit_blocks)])
        self.norm = nn.LayerNorm(c, elementwise_affine=False, eps=1e-6)
        self.final_table = nn.Parameter(torch.zeros(2, c))
        self.final_adaln = nn.Linear(c, 2 * c)
        self.out = nn.Linear(c, PATCH * PATCH * LATENT_CHANNELS)

    def forward(self, LATENT: Tensor, TIMESTEP: Tensor, TEXT_EMBEDDING: Tensor) -> Tensor:
        dtype = self.patch.weight.dtype
        b, f, ch, h, w = LATENT.shape
        gh, gw = h // self.p, w // self.p
        c = self.width
        x = self.patch(LATENT.reshape(b * f, ch, h, w).to(dtype))  # [b*f, c, gh, gw]
        x = x.reshape(b, f, c, gh * gw).permute(0, 1, 3, 2).reshape(b, f * gh * gw, c)
        # Fixed 3-D position features: a third of the width each for frame, row and column.
        third = (c // 3) // 2 * 2
        fi = torch.arange(f, device=x.device).reshape(f, 1, 1).expand(f, gh, gw).reshape(-1)
        ri = torch.arange(gh, device=x.device).reshape(1, gh, 1).expand(f, gh, gw).reshape(-1)
        ci = torch.arange(gw, device=x.device).reshape(1, 1, gw).expand(f, gh, gw).reshape(-1)
        pos = torch.cat([sincos(fi, third), sincos(ri, third), sincos(ci, c - 2 * third)], dim=-1)
        x = x + pos.to(dtype).unsqueeze(0)
        # Conditioning: timestep features + mean-pooled text, one vector per sample.
        t = sincos(TIMESTEP.reshape(b), 256).to(dtype)
        cond = self.time2(F.silu(self.time1(t))) + self.text(TEXT_EMBEDDING.to(dtype).mean(dim=1))
        cond = F.silu(cond)
        modulation = self.adaln(cond)
        for block in self.blocks:
            x = block(x, modulation)
        mod = (self.final_adaln(cond).reshape(b, 2, c) + self.final_table).unsqueeze(2)
        x = self.norm(x) * (1 + mod[:, 1]) + mod[:, 0]
        x = self.out(x)  # [b, f*gh*gw, p*p*4]
        x = x.reshape(b, f, gh, gw, self.p, self.p, self.lc).permute(0, 1, 6, 2, 4, 3, 5)
        return x.reshape(b, f, self.lc, h, w).float()


# ---------------------------------------------------------------------------------------------
# VAE decoder (Stable Diffusion VAE decoder size)


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, groups: int):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=1e-6)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, cout, eps=1e-6)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class AttnBlock(nn.Module):
    def __init__(self, c: int, groups: int):
        super().__init__()
        self.norm = nn.GroupNorm(groups, c, eps=1e-6)
        self.q = nn.Linear(c, c)
        self.k = nn.Linear(c, c)
        self.v = nn.Linear(c, c)
        self.out = nn.Linear(c, c)

    def forward(self, x: Tensor) -> Tensor:
        n, c, h, w = x.shape
        t = self.norm(x).reshape(n, c, h * w).transpose(1, 2)
        a = F.scaled_dot_product_attention(
            self.q(t).unsqueeze(1), self.k(t).unsqueeze(1), self.v(t).unsqueeze(1)
        ).squeeze(1)
        return x + self.out(a).transpose(1, 2).reshape(n, c, h, w)


class Upsample(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class VaeDecoder(nn.Module):
    """LATENT [frames, 4, h, w] -> IMAGE [frames, 3, 8h, 8w] in [0, 1], each frame decoded alone."""

    def __init__(self, s: Scale):
        super().__init__()
        g = s.vae_groups
        ch = list(reversed(s.vae_channels))  # 512, 512, 256, 128
        self.scale = VAE_SCALE
        self.post_quant = nn.Conv2d(LATENT_CHANNELS, LATENT_CHANNELS, 1)
        self.conv_in = nn.Conv2d(LATENT_CHANNELS, ch[0], 3, padding=1)
        self.mid = nn.Sequential(ResBlock(ch[0], ch[0], g), AttnBlock(ch[0], g), ResBlock(ch[0], ch[0], g))
        levels: List[nn.Module] = []
        cin = ch[0]
        for i, cout in enumerate(ch):
            blocks: List[nn.Module] = []
            for _ in range(s.vae_layers + 1):
                blocks.append(ResBlock(cin, cout, g))
                cin = cout
            if i < len(ch) - 1:
                blocks.append(Upsample(cout))
            levels.append(nn.Sequential(*blocks))
        self.up = nn.Sequential(*levels)
        self.norm_out = nn.GroupNorm(g, ch[-1], eps=1e-6)
        self.conv_out = nn.Conv2d(ch[-1], 3, 3, padding=1)

    def forward(self, LATENT: Tensor) -> Tensor:
        dtype = self.conv_in.weight.dtype
        x = self.post_quant(LATENT.to(dtype) / self.scale)
        x = self.up(self.mid(self.conv_in(x)))
        x = self.conv_out(F.silu(self.norm_out(x)))
        # SD's decoder gives [-1, 1]; the example's interface is [0, 1].
        return ((x.float().clamp(-1.0, 1.0) + 1.0) * 0.5).contiguous()


# ---------------------------------------------------------------------------------------------


def build(name: str, s: Scale) -> nn.Module:
    if name == "text_encoder":
        return TextEncoder(s)
    if name == "denoiser":
        return Denoiser(s)
    if name == "vae_decoder":
        return VaeDecoder(s)
    raise ValueError(name)


def parameter_count(name: str, s: Scale) -> int:
    """Parameters of the model at scale `s`, counted on the meta device (nothing allocated)."""
    with torch.device("meta"):
        model = build(name, s)
    return sum(p.numel() for p in model.parameters())


def init_untrained(model: nn.Module, seed: int) -> None:
    """Seeded random weights (UNTRAINED): normal(0, 0.02) for matrices, zero biases, unit norms.

    Unlike a training run's adaLN-zero start (gates at zero, so every block is the identity and
    the output is zero), the modulation is random too, so every block does work on real numbers.
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 or name.endswith("table"):
                fan_in = p[0].numel() if p.dim() >= 2 else p.shape[-1]
                std = min(0.02, 1.0 / math.sqrt(max(fan_in, 1)))
                p.copy_(torch.randn(p.shape, generator=generator) * std)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.fill_(1.0)
