"""TorchScript copies of the example's four heavy models, for the PyTorch (libtorch) backend.

Reads each models/<name>/1/model.onnx (the files the CPU variant serves), takes its weights (the
ONNX initializers, by name) and writes models/<name>/1/model.pt: a scripted module whose forward
computes what the ONNX graph computes, with the same input and output names and shapes. Nothing
is trained or drawn at random here, so the numbers are the ONNX files' numbers:

- text_encoder, denoiser, vae_decoder: the UNTRAINED networks of generate-models.ts, written out
  again in PyTorch (the graph's structure is fixed by that script; the node list is checked);
- super_resolution: Real-ESRGAN realesr-animevideov3 (SRVGGNetCompact), built from the ONNX
  graph's node list (Conv/PRelu body, DepthToSpace, nearest Resize of the input, Add), so its
  weights are the ones convert-realesrgan.ts read from the ncnn files (float16 in ncnn, float32
  here as in the ONNX file).

The modules are scripted (not traced), so batch, frame count and spatial sizes stay dynamic.
Only the standard library and torch are used; the ONNX protobuf is read by the small wire-format
reader below (no `onnx` package needed). The output is byte-for-byte the same on every run with
the same torch version; the committed files are torch 1.13's (Debian's python3-torch), and
`--check` under another torch compares their weights instead of their bytes. Run with a Python
that has torch:

  /usr/bin/python3 examples/text-to-video/scripts/export-torchscript.py           # write model.pt
  /usr/bin/python3 examples/text-to-video/scripts/export-torchscript.py --check   # compare only

`test/torch-variant.test.ts` serves these files next to the ONNX ones and compares the outputs.
"""

import hashlib
import io
import math
import os
import struct
import sys
import zipfile
from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")

# --- ONNX (protobuf wire format) -------------------------------------------------------------


def _varint(data: bytes, pos: int) -> Tuple[int, int]:
    result = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Dict[int, List[object]]:
    """One message's fields: number -> values (ints for varint/fixed, bytes for length-delimited)."""
    out: Dict[int, List[object]] = {}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value = data[pos : pos + 8]
            pos += 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            value = data[pos : pos + length]
            pos += length
        elif wire == 5:
            value = data[pos : pos + 4]
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def _text(value: object) -> str:
    assert isinstance(value, bytes)
    return value.decode("utf-8")


def _dims(values: List[object]) -> List[int]:
    dims: List[int] = []
    for v in values:  # packed (bytes) or not (int)
        if isinstance(v, bytes):
            pos = 0
            while pos < len(v):
                d, pos = _varint(v, pos)
                dims.append(d)
        else:
            assert isinstance(v, int)
            dims.append(v)
    return dims


FLOAT, INT64 = 1, 7


def read_onnx(path: str) -> Tuple[Dict[str, Tensor], List[Tuple[str, List[str], List[str]]]]:
    """The graph's initializers (name -> tensor, raw_data only, as onnx.ts writes them) and nodes
    (op type, inputs, outputs)."""
    with open(path, "rb") as f:
        model = _fields(f.read())
    graph = _fields(model[7][0])  # ModelProto.graph
    weights: Dict[str, Tensor] = {}
    for raw in graph.get(5, []):  # GraphProto.initializer: TensorProto
        t = _fields(raw)
        name = _text(t[8][0])
        dtype = t[2][0]
        dims = _dims(t.get(1, []))
        data = t[9][0]  # raw_data, little-endian
        assert isinstance(data, bytes)
        if dtype == FLOAT:
            values = struct.unpack(f"<{len(data) // 4}f", data)
            weights[name] = torch.tensor(values, dtype=torch.float32).reshape(dims)
        elif dtype == INT64:
            values = struct.unpack(f"<{len(data) // 8}q", data)
            weights[name] = torch.tensor(values, dtype=torch.int64).reshape(dims)
        else:
            raise ValueError(f"{name}: ONNX data type {dtype} is not read here")
    nodes = []
    for raw in graph.get(1, []):  # GraphProto.node: NodeProto
        n = _fields(raw)
        nodes.append((_text(n[4][0]), [_text(v) for v in n.get(1, [])], [_text(v) for v in n.get(2, [])]))
    return weights, nodes


def ops(nodes: List[Tuple[str, List[str], List[str]]]) -> List[str]:
    return [op for op, _, _ in nodes]


# --- the networks ----------------------------------------------------------------------------


def fixed(t: Tensor) -> nn.Parameter:
    return nn.Parameter(t.clone(), requires_grad=False)


class TextEncoder(nn.Module):
    """TOKENS [batch, 32] int64 -> EMBEDDING [batch, 32, 64]: 2 pre-norm transformer layers."""

    def __init__(self, w: Dict[str, Tensor]):
        super().__init__()
        self.embedding = fixed(w["embedding"])
        self.position = fixed(w["position"])
        self.scale = fixed(w["attention_scale"])
        names = ["ln1.gamma", "ln1.beta", "wq", "wk", "wv", "wo", "ln2.gamma", "ln2.beta", "w1", "b1", "w2"]
        self.layers = nn.ParameterList([fixed(w[f"layer{i}.{n}"]) for i in range(2) for n in names])
        self.final_gamma = fixed(w["final.gamma"])
        self.final_beta = fixed(w["final.beta"])

    def forward(self, TOKENS: Tensor) -> Tensor:
        x = F.embedding(TOKENS, self.embedding) + self.position
        p: List[Tensor] = [t for t in self.layers]
        for i in range(2):
            ln1g, ln1b, wq, wk, wv, wo, ln2g, ln2b, w1, b1, w2 = p[i * 11 : (i + 1) * 11]
            h = F.layer_norm(x, [x.shape[-1]], ln1g, ln1b, 1e-5)
            q = torch.matmul(h, wq)
            k = torch.matmul(h, wk)
            v = torch.matmul(h, wv)
            attention = torch.softmax(torch.matmul(q, k.transpose(1, 2)) * self.scale, dim=-1)
            x1 = x + torch.matmul(torch.matmul(attention, v), wo)
            h2 = F.layer_norm(x1, [x1.shape[-1]], ln2g, ln2b, 1e-5)
            x = x1 + torch.matmul(torch.relu(torch.matmul(h2, w1) + b1), w2)
        return F.layer_norm(x, [x.shape[-1]], self.final_gamma, self.final_beta, 1e-5)


def silu(x: Tensor) -> Tensor:
    return x * torch.sigmoid(x)  # as the ONNX graph writes it (Sigmoid, Mul)


class Denoiser(nn.Module):
    """LATENT [batch, frames, 4, h, w], TIMESTEP [batch, 1], TEXT_EMBEDDING [batch, 32, 64] ->
    NOISE_PRED like LATENT."""

    def __init__(self, w: Dict[str, Tensor]):
        super().__init__()
        for conv in ["conv_in", "conv_mid", "conv_up", "conv_out"]:
            setattr(self, f"{conv}_weight", fixed(w[f"{conv}.weight"]))
            setattr(self, f"{conv}_bias", fixed(w[f"{conv}.bias"]))
        self.frequencies = fixed(w["time.frequencies"])
        self.cond_weight = fixed(w["cond.weight"])
        self.cond_bias = fixed(w["cond.bias"])
        self.mix = fixed(w["half"])
        self.skip = fixed(w["skip"])

    def forward(self, LATENT: Tensor, TIMESTEP: Tensor, TEXT_EMBEDDING: Tensor) -> Tensor:
        b, f, c, h, w = LATENT.shape
        x = LATENT.reshape(-1, c, h, w)
        h1 = silu(F.conv2d(x, self.conv_in_weight, self.conv_in_bias, padding=1))
        h2 = F.conv2d(h1, self.conv_mid_weight, self.conv_mid_bias, padding=1)
        text = TEXT_EMBEDDING.mean(dim=1)
        angles = TIMESTEP * self.frequencies
        time = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
        cond = silu(torch.matmul(text + time, self.cond_weight) + self.cond_bias)
        v1 = h2.reshape(b, f, -1, h, w) + cond[:, None, :, None, None]
        v2 = (v1 + v1.mean(dim=1, keepdim=True)) * self.mix
        h4 = silu(v2.reshape(-1, v2.shape[2], h, w))
        h6 = silu(F.conv2d(h4, self.conv_up_weight, self.conv_up_bias, padding=1))
        eps = F.conv2d(h6, self.conv_out_weight, self.conv_out_bias, padding=1)
        return LATENT * self.skip + eps.reshape(LATENT.shape)


class VaeDecoder(nn.Module):
    """LATENT [frames, 4, h, w] -> IMAGE [frames, 3, 8h, 8w] in [0, 1]."""

    def __init__(self, w: Dict[str, Tensor]):
        super().__init__()
        self.weights = nn.ParameterList([fixed(w[f"conv{i}.weight"]) for i in range(3)])
        self.biases = nn.ParameterList([fixed(w[f"conv{i}.bias"]) for i in range(3)])
        self.out_weight = fixed(w["conv_out.weight"])
        self.out_bias = fixed(w["conv_out.bias"])
        scales = w["scales"].tolist()
        assert scales == [1.0, 1.0, 2.0, 2.0], scales

    def forward(self, LATENT: Tensor) -> Tensor:
        x = LATENT
        for weight, bias in zip(self.weights, self.biases):
            x = silu(F.conv2d(x, weight, bias, padding=1))
            # ONNX Resize, linear, half_pixel, scale 2 = bilinear without corner alignment
            x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
        return torch.sigmoid(F.conv2d(x, self.out_weight, self.out_bias, padding=1))


class Conv(nn.Module):
    def __init__(self, weight: Tensor, bias: Tensor):
        super().__init__()
        self.weight = fixed(weight)
        self.bias = fixed(bias)
        self.padding = weight.shape[-1] // 2

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight, self.bias, padding=self.padding)


class PRelu(nn.Module):
    def __init__(self, slope: Tensor):
        super().__init__()
        self.slope = fixed(slope.reshape(-1))

    def forward(self, x: Tensor) -> Tensor:
        return F.prelu(x, self.slope)


class SuperResolution(nn.Module):
    """Real-ESRGAN SRVGGNetCompact: input [n, 3, h, w] -> output [n, 3, 4h, 4w]."""

    def __init__(self, w: Dict[str, Tensor], nodes: List[Tuple[str, List[str], List[str]]]):
        super().__init__()
        names = ops(nodes)
        body = names[:-3]
        if names[-3:] != ["DepthToSpace", "Resize", "Add"] or set(body) != {"Conv", "PRelu"}:
            raise ValueError(f"not the SRVGGNetCompact graph this script knows: {names}")
        layers: List[nn.Module] = []
        for op, inputs, _ in nodes[:-3]:
            layers.append(Conv(w[inputs[1]], w[inputs[2]]) if op == "Conv" else PRelu(w[inputs[1]]))
        self.body = nn.Sequential(*layers)
        out_channels = w[nodes[-4][1][1]].shape[0]
        self.upscale = int(round((out_channels / 3) ** 0.5))
        scales = w[nodes[-2][1][2]].tolist()
        assert scales == [1.0, 1.0, float(self.upscale), float(self.upscale)], scales

    def forward(self, input: Tensor) -> Tensor:
        out = F.pixel_shuffle(self.body(input), self.upscale)
        # ONNX Resize, nearest, floor, asymmetric, integer scale = torch's nearest
        return out + F.interpolate(input, scale_factor=float(self.upscale), mode="nearest")


# interpolate.ts's block size is 8 pixels: written as a literal below (TorchScript compiles no globals).


def _js_round(x: float) -> int:
    """JavaScript's Math.round (halves up; Python's round() rounds them to even)."""
    return int(math.floor(x + 0.5))


def _to_byte(v: Tensor) -> Tensor:
    return torch.floor(v.clamp(0.0, 1.0) * 255.0 + 0.5).to(torch.uint8)


def _median3x3(t: Tensor) -> Tensor:
    """The median of each value's 3x3 neighbourhood inside the field (sorted[len >> 1], as interpolate.ts)."""
    rows = t.shape[1]
    cols = t.shape[2]
    padded = F.pad(t, [1, 1, 1, 1], value=float("nan"))
    shifted: List[Tensor] = []
    for dy in range(3):
        for dx in range(3):
            shifted.append(padded[:, dy : dy + rows, dx : dx + cols])
    window = torch.stack(shifted, dim=-1)
    present = (~torch.isnan(window)).sum(dim=-1, keepdim=True)
    ordered = torch.sort(torch.nan_to_num(window, nan=float("inf")), dim=-1).values
    return torch.gather(ordered, -1, torch.div(present, 2, rounding_mode="floor")).squeeze(-1)


def _dense(field: Tensor, h: int, w: int) -> Tensor:
    """A block field [P, rows, cols] at every pixel [P, h, w]: bilinear between block centres, clamped."""
    rows = field.shape[1]
    cols = field.shape[2]
    device = field.device
    fx = ((torch.arange(w, device=device, dtype=torch.float64) + 0.5) / 8 - 0.5).clamp(0.0, float(cols - 1))
    fy = ((torch.arange(h, device=device, dtype=torch.float64) + 0.5) / 8 - 0.5).clamp(0.0, float(rows - 1))
    c0 = torch.floor(fx).to(torch.long)
    r0 = torch.floor(fy).to(torch.long)
    c1 = (c0 + 1).clamp(max=cols - 1)
    r1 = (r0 + 1).clamp(max=rows - 1)
    tx = (fx - c0.to(torch.float64))[None, None, :]
    ty = (fy - r0.to(torch.float64))[None, :, None]
    a = field[:, r0, :]
    b = field[:, r1, :]
    top = a[:, :, c0] * (1 - tx) + a[:, :, c1] * tx
    bottom = b[:, :, c0] * (1 - tx) + b[:, :, c1] * tx
    return top * (1 - ty) + bottom * ty


def _bilinear(planes: Tensor, x: Tensor, y: Tensor) -> Tensor:
    """planes [J, 3, h, w] sampled at (x, y) [J, h, w], clamped to the frame -> [J, 3, h, w]."""
    h = planes.shape[2]
    w = planes.shape[3]
    cx = x.clamp(0.0, float(w - 1))
    cy = y.clamp(0.0, float(h - 1))
    x0 = torch.floor(cx).to(torch.long)
    y0 = torch.floor(cy).to(torch.long)
    x1 = (x0 + 1).clamp(max=w - 1)
    y1 = (y0 + 1).clamp(max=h - 1)
    tx = (cx - x0.to(torch.float64))[:, None]
    ty = (cy - y0.to(torch.float64))[:, None]
    flat = planes.reshape(planes.shape[0], 3, h * w)
    top = _pixels(flat, y0, x0, w) * (1 - tx) + _pixels(flat, y0, x1, w) * tx
    bottom = _pixels(flat, y1, x0, w) * (1 - tx) + _pixels(flat, y1, x1, w) * tx
    return top * (1 - ty) + bottom * ty


def _pixels(flat: Tensor, y: Tensor, x: Tensor, w: int) -> Tensor:
    """flat [J, 3, h * w] at pixels (y, x) [J, h, w] -> [J, 3, h, w]."""
    index = (y * w + x).reshape(y.shape[0], 1, -1).expand(-1, 3, -1)
    return torch.gather(flat, 2, index).reshape(y.shape[0], 3, y.shape[1], y.shape[2])


class FrameInterpolation(nn.Module):
    """FRAMES [n, 3, H, W] in [0, 1], FRAME_COUNT [1] -> VIDEO [FRAME_COUNT, H, W, 3] uint8.

    The algorithm of models/frame_interpolation/1/interpolate.ts (block matching with a motion
    penalty, a 3x3 median of the vectors, bidirectional warping and blending), as tensor
    operations: every block's sums of differences one vertical displacement at a time, then the
    costs, fits and choice of all displacements at once (on a GPU the module's time is its kernel
    launches: ~200 a call this way, ~550 with ops per displacement). It computes in float64 where
    the TypeScript computes in doubles and rounds to float32 where that stores Float32Arrays, so
    the two agree but for sums taken in another order (a near tie between two displacements may
    then go the other way).
    """

    def __init__(self):
        super().__init__()
        # The working memory _motion_in_chunks aims a call at (bytes); a test sets it to 1 to
        # compare one pair at a time with all at once.
        self.motion_bytes: int = 2 << 30

    def forward(self, FRAMES: Tensor, FRAME_COUNT: Tensor) -> Tensor:
        n = FRAMES.shape[0]
        h = FRAMES.shape[2]
        w = FRAMES.shape[3]
        count = int(FRAME_COUNT.reshape(-1)[0].item())
        if n < 1 or count < 1 or count > 256:
            raise RuntimeError("FRAMES needs a frame and FRAME_COUNT 1 to 256")
        device = FRAMES.device
        frames = FRAMES.to(torch.float64)
        # Each output frame's position: frame i of the input, and f of the way to frame i + 1.
        sources: List[int] = []
        fractions: List[float] = []
        pairs: List[int] = []
        for j in range(count):
            t = 0.0 if count == 1 or n == 1 else (j * (n - 1)) / (count - 1)
            i = min(n - 1, int(math.floor(t)))
            f = t - i
            sources.append(i)
            fractions.append(f)
            if not (f < 1e-6 or i == n - 1) and i not in pairs:
                pairs.append(i)
        out = _to_byte(frames[torch.tensor(sources, device=device)]).permute(0, 2, 3, 1).contiguous()
        if len(pairs) == 0:
            return out
        luma = (0.299 * frames[:, 0] + 0.587 * frames[:, 1] + 0.114 * frames[:, 2]).to(torch.float32)
        luma = luma.to(torch.float64)
        vx, vy = self._motion_in_chunks(luma, torch.tensor(pairs, device=device), h, w)
        warped: List[int] = []
        slot: List[int] = []
        fs: List[float] = []
        for j in range(count):
            i = sources[j]
            if not (fractions[j] < 1e-6 or i == n - 1):
                warped.append(j)
                slot.append(pairs.index(i))
                fs.append(fractions[j])
        at = torch.tensor(slot, device=device)
        f = torch.tensor(fs, device=device, dtype=torch.float64)[:, None, None]
        i = torch.tensor([sources[j] for j in warped], device=device)
        mx = vx[at]
        my = vy[at]
        x = torch.arange(w, device=device, dtype=torch.float64)[None, None, :]
        y = torch.arange(h, device=device, dtype=torch.float64)[None, :, None]
        # Both ends of each in-between frame in one sampling: frame i back along the motion, i + 1 forward.
        both = _bilinear(
            torch.cat([frames[i], frames[i + 1]]),
            torch.cat([x - f * mx, x + (1 - f) * mx]),
            torch.cat([y - f * my, y + (1 - f) * my]),
        )
        a = both[: len(warped)]
        b = both[len(warped) :]
        f4 = f[:, None]
        out[torch.tensor(warped, device=device)] = _to_byte((1 - f4) * a + f4 * b).permute(0, 2, 3, 1)
        return out

    def _motion_in_chunks(self, luma: Tensor, first: Tensor, h: int, w: int) -> Tuple[Tensor, Tensor]:
        """_motion of each pair (first[k], first[k] + 1), a few pairs at a time. Its intermediates
        grow with the (2r + 1)^2 displacements of every block (r = min(h, w) / 32): ~4.4 GB a pair
        at 1024x1024, so a 32-frame video's 15 pairs at once took ~65 GB of GPU memory. Chunks of
        pairs keep a call near `motion_bytes` (one pair at least) whatever the size; at 256x256 (32 MB
        a pair) every pair still goes at once. Pairs are independent: the same result either way."""
        radius = max(2, _js_round(float(min(h, w)) / 32.0))
        span = 2 * radius + 1
        rows = (h + 8 - 1) // 8
        cols = (w + 8 - 1) // 8
        # The shifted copies and differences of one displacement row, and ~6 tensors of all costs.
        pair_bytes = 8 * (2 * span * rows * 8 * cols * 8 + 6 * span * span * rows * cols)
        chunk = max(1, self.motion_bytes // pair_bytes)
        p = first.shape[0]
        if p <= chunk:
            return self._motion(luma[first], luma[first + 1], h, w)
        xs: List[Tensor] = []
        ys: List[Tensor] = []
        for start in range(0, p, chunk):
            some = first[start : start + chunk]
            x, y = self._motion(luma[some], luma[some + 1], h, w)
            xs.append(x)
            ys.append(y)
        return torch.cat(xs), torch.cat(ys)

    def _motion(self, a: Tensor, b: Tensor, h: int, w: int) -> Tuple[Tensor, Tensor]:
        """Block-matching motion from a to b ([P, h, w] luma) -> dense (vx, vy), each [P, h, w]."""
        device = a.device
        radius = max(2, _js_round(float(min(h, w)) / 32.0))
        span = 2 * radius + 1
        cols = (w + 8 - 1) // 8
        rows = (h + 8 - 1) // 8
        hp = rows * 8
        wp = cols * 8
        p = a.shape[0]
        padded_a = torch.zeros((p, hp, wp), dtype=torch.float64, device=device)
        padded_a[:, :h, :w] = a
        inside = torch.zeros((hp, wp), dtype=torch.float64, device=device)
        inside[:h, :w] = 1.0
        padded_b = torch.zeros((p, hp + 2 * radius, wp + 2 * radius), dtype=torch.float64, device=device)
        padded_b[:, radius : radius + h, radius : radius + w] = b
        sads: List[Tensor] = []
        for vy in range(-radius, radius + 1):
            moved = torch.stack(
                [padded_b[:, radius + vy : radius + vy + hp, radius + vx : radius + vx + wp] for vx in range(-radius, radius + 1)]
            )
            diff = (padded_a[None] - moved).abs() * inside
            sads.append(diff.reshape(span, p, rows, 8, cols, 8).sum(dim=(3, 5)))
        sad = torch.cat(sads)
        shift = torch.arange(span * span, device=device)
        vys = torch.div(shift, span, rounding_mode="floor") - radius
        vxs = shift % span - radius
        y0 = torch.arange(rows, device=device) * 8
        x0 = torch.arange(cols, device=device) * 8
        y1 = (y0 + 8).clamp(max=h)
        x1 = (x0 + 8).clamp(max=w)
        fits_y = (y0[None] + vys[:, None] >= 0) & (y1[None] + vys[:, None] <= h)
        fits_x = (x0[None] + vxs[:, None] >= 0) & (x1[None] + vxs[:, None] <= w)
        moving = (vxs != 0) | (vys != 0)
        fits = fits_y[:, :, None] & fits_x[:, None, :] & moving[:, None, None]
        penalty = 0.002 * 8 * 8 * (vxs.abs() + vys.abs()).to(torch.float64)
        cost = sad + penalty[:, None, None, None]
        costs = torch.where(fits[:, None], cost, torch.full_like(cost, float("inf")))
        still = sad[radius * span + radius]
        # The first of the lowest costs wins, no motion first: as the TypeScript's strict `<`.
        all_costs = torch.cat([still[None], costs])
        all_sads = torch.cat([still[None], sad])
        pick = torch.argmin(all_costs, dim=0)
        best = torch.gather(all_sads, 0, pick[None]).squeeze(0)
        shifts = torch.stack([vxs, vys], dim=1).to(torch.float64)
        table = torch.cat([torch.zeros((1, 2), dtype=torch.float64, device=device), shifts])
        moves = table[pick]
        moves = torch.where((best > 0.95 * still)[..., None], torch.zeros_like(moves), moves)
        # Both components at once: [2P, rows, cols].
        field = _median3x3(torch.cat([moves[..., 0], moves[..., 1]]))
        dense = _dense(field, h, w).to(torch.float32).to(torch.float64)
        return dense[:p], dense[p:]


TEXT_ENCODER_OPS = ["Gather", "Add"] + [
    "LayerNormalization", "MatMul", "MatMul", "MatMul", "Transpose", "MatMul", "Mul", "Softmax",
    "MatMul", "MatMul", "Add", "LayerNormalization", "MatMul", "Add", "Relu", "MatMul", "Add",
] * 2 + ["LayerNormalization"]  # fmt: skip


def build(name: str) -> nn.Module:
    if name == "frame_interpolation":
        return FrameInterpolation()
    weights, nodes = read_onnx(os.path.join(MODELS, name, "1", "model.onnx"))
    if name == "text_encoder":
        if ops(nodes) != TEXT_ENCODER_OPS:
            raise ValueError(f"text_encoder: unexpected graph {ops(nodes)}")
        return TextEncoder(weights)
    if name == "denoiser":
        convs = [inputs[1] for op, inputs, _ in nodes if op == "Conv"]
        if convs != ["conv_in.weight", "conv_mid.weight", "conv_up.weight", "conv_out.weight"]:
            raise ValueError(f"denoiser: unexpected convolutions {convs}")
        return Denoiser(weights)
    if name == "vae_decoder":
        if ops(nodes) != ["Conv", "Sigmoid", "Mul", "Resize"] * 3 + ["Conv", "Sigmoid"]:
            raise ValueError(f"vae_decoder: unexpected graph {ops(nodes)}")
        return VaeDecoder(weights)
    return SuperResolution(weights, nodes)


def export(name: str) -> bytes:
    module = torch.jit.script(build(name).eval())
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    # The archive again without its *.debug_pkl records (source ranges that name this script's and
    # torch's absolute paths, so the bytes would depend on where the repository is checked out);
    # TorchScript loads without them. Same order, stored, the zip's fixed 1980 timestamps.
    source = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
        for info in source.infolist():
            if not info.filename.endswith(".debug_pkl"):
                target.writestr(zipfile.ZipInfo(info.filename, (1980, 1, 1, 0, 0, 0)), source.read(info))
    return out.getvalue()


# The torch the committed files were written with: files it writes load in every torch since (the
# GPU machine's 2.11 included), while a newer torch's files may not load in an older one.
WRITTEN_WITH = "1.13."


def same_weights(committed: bytes, module: nn.Module) -> bool:
    """Whether a committed file holds exactly the module's parameters and buffers, by name."""
    loaded = torch.jit.load(io.BytesIO(committed)).state_dict()
    expected = module.state_dict()
    return loaded.keys() == expected.keys() and all(torch.equal(loaded[k], expected[k]) for k in expected)


def main() -> int:
    check = "--check" in sys.argv[1:]
    torch.manual_seed(0)
    failed = False
    for name in ["text_encoder", "denoiser", "vae_decoder", "super_resolution", "frame_interpolation"]:
        data = export(name)
        target = os.path.join(MODELS, name, "1", "model.pt")
        digest = hashlib.sha256(data).hexdigest()
        if check:
            with open(target, "rb") as f:
                committed = f.read()
            if torch.__version__.startswith(WRITTEN_WITH):
                same = committed == data
                verdict = f"{'same' if same else 'DIFFERENT'} ({len(data)} bytes, sha256 {digest})"
            else:
                same = same_weights(committed, build(name).eval())
                verdict = (
                    f"{'same weights' if same else 'DIFFERENT weights'} (torch {torch.__version__} writes other "
                    f"bytes; compared byte for byte under torch {WRITTEN_WITH.rstrip('.')})"
                )
            failed = failed or not same
            print(f"models/{name}/1/model.pt: {verdict}")
        else:
            with open(target, "wb") as f:
                f.write(data)
            print(f"wrote models/{name}/1/model.pt ({len(data)} bytes, sha256 {digest}, torch {torch.__version__})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
