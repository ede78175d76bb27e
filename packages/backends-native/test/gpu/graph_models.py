#!/usr/bin/env python3
"""The models torch-graphs-gpu.mjs runs: a denoiser-like net (convolutions in a scripted loop, two
outputs) and one that reads a value back to the host in forward, which a CUDA graph capture cannot
contain. Usage: graph_models.py OUT_DIR (writes net.pt and sync.pt there)."""
import sys

import torch
import torch.nn.functional as F


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(4, 64, 3, padding=1)
        self.b = torch.nn.Conv2d(64, 64, 3, padding=1)
        self.c = torch.nn.Conv2d(64, 4, 3, padding=1)

    def forward(self, x, t):
        h = F.silu(self.a(x) + t.view(-1, 1, 1, 1))
        for _ in range(6):
            h = F.silu(self.b(h)) + h
        return self.c(h), h.mean(dim=(2, 3))


class Sync(torch.nn.Module):
    def forward(self, x):
        if float(x.sum()) > 0.0:
            return x * 2.0
        return x * 3.0


torch.manual_seed(0)
torch.jit.script(Net().eval()).save(sys.argv[1] + "/net.pt")
torch.jit.script(Sync()).save(sys.argv[1] + "/sync.pt")
