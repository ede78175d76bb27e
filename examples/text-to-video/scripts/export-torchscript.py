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
the same torch version. Run with a Python that has torch (Debian: python3-torch):

  /usr/bin/python3 examples/text-to-video/scripts/export-torchscript.py           # write model.pt
  /usr/bin/python3 examples/text-to-video/scripts/export-torchscript.py --check   # compare only

`test/torch-variant.test.ts` serves these files next to the ONNX ones and compares the outputs.
"""

import hashlib
import io
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


TEXT_ENCODER_OPS = ["Gather", "Add"] + [
    "LayerNormalization", "MatMul", "MatMul", "MatMul", "Transpose", "MatMul", "Mul", "Softmax",
    "MatMul", "MatMul", "Add", "LayerNormalization", "MatMul", "Add", "Relu", "MatMul", "Add",
] * 2 + ["LayerNormalization"]  # fmt: skip


def build(name: str) -> nn.Module:
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


def main() -> int:
    check = "--check" in sys.argv[1:]
    torch.manual_seed(0)
    failed = False
    for name in ["text_encoder", "denoiser", "vae_decoder", "super_resolution"]:
        data = export(name)
        target = os.path.join(MODELS, name, "1", "model.pt")
        digest = hashlib.sha256(data).hexdigest()
        if check:
            with open(target, "rb") as f:
                same = f.read() == data
            failed = failed or not same
            print(f"models/{name}/1/model.pt: {'same' if same else 'DIFFERENT'} ({len(data)} bytes, sha256 {digest})")
        else:
            with open(target, "wb") as f:
                f.write(data)
            print(f"wrote models/{name}/1/model.pt ({len(data)} bytes, sha256 {digest}, torch {torch.__version__})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
