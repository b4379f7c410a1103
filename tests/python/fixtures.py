#!/usr/bin/python3
"""Test fixtures made the way users make them: encoders exported with torch.jit (script and
trace), array datasets written with h5py, and independent reference checks of a cache.

Run with Debian's /usr/bin/python3 (python3-torch, python3-h5py, python3-numpy).
"""
import argparse
import json
import os
import sys
from typing import Dict, List

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# As embcache does (encoder.cpp): no TorchScript fusion on CPU. Debian 13's torch 2.6 enables it, and
# a small ViT's second call then never returned.
torch._C._jit_override_can_fuse_on_cpu(False)


# ---------------------------------------------------------------- encoders
class TinyMulti(nn.Module):
    """Three levels: stride-2 map, stride-4 map, pooled vector."""

    def __init__(self, in_ch: int = 3):
        super().__init__()
        self.c1 = nn.Conv2d(in_ch, 8, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        a = F.relu(self.c1(x))
        b = F.relu(self.c2(a))
        return [a, b, b.mean(dim=(2, 3))]


class TinyDict(nn.Module):
    def __init__(self, in_ch: int = 3):
        super().__init__()
        self.stem = nn.Conv2d(in_ch, 4, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        s = torch.tanh(self.stem(x))
        return {"stem": s, "pooled": s.mean(dim=(2, 3))}


class Single(nn.Module):
    def __init__(self, in_ch: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, 6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class InPlace(nn.Module):
    """Changes its input in place before a 1x1 conv (some user encoders normalise that way)."""

    def __init__(self, in_ch: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, 6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2.0)
        return self.conv(x)


class Doubled(InPlace):
    """InPlace's features without touching the input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x * 2.0)


class Light(nn.Module):
    """I/O-bound benchmark encoder: one 1x1 conv to many channels at full resolution."""

    def __init__(self, in_ch: int = 3, out_ch: int = 64):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class Heavy(nn.Module):
    """Compute-bound encoder: stem, `depth` 3x3 convs at width w1, downsample, `depth` at w2.
    The test fixture is small (48/96, depth 4); the benchmark's is ResNet-18-like (64/128, 6)."""

    def __init__(self, in_ch: int = 3, w1: int = 48, w2: int = 96, depth: int = 4, pooled: bool = False):
        super().__init__()
        self.pooled = pooled
        self.stem = nn.Sequential(nn.Conv2d(in_ch, w1, 3, stride=2, padding=1), nn.ReLU())
        self.block1 = nn.Sequential(*[nn.Sequential(nn.Conv2d(w1, w1, 3, padding=1), nn.ReLU()) for _ in range(depth)])
        self.down = nn.Sequential(nn.Conv2d(w1, w2, 3, stride=2, padding=1), nn.ReLU())
        self.block2 = nn.Sequential(*[nn.Sequential(nn.Conv2d(w2, w2, 3, padding=1), nn.ReLU()) for _ in range(depth)])

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        a = self.block1(self.stem(x))
        b = self.block2(self.down(a))
        if self.pooled:
            return [a, b, b.mean(dim=(2, 3))]
        return [a, b]


class ConvBn(nn.Module):
    """Conv-BatchNorm-ReLU blocks with trained-looking statistics: what --optimize folds."""

    def __init__(self, in_ch: int = 3):
        super().__init__()
        self.first = nn.Sequential(*(ConvBn.block(in_ch, 16, 2) + ConvBn.block(16, 16, 1)))
        self.second = nn.Sequential(*ConvBn.block(16, 32, 2))

    @staticmethod
    def block(c_in: int, c_out: int, stride: int) -> List[nn.Module]:
        bn = nn.BatchNorm2d(c_out)
        with torch.no_grad():
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.2, 0.2)
        return [nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False), bn, nn.ReLU()]

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        a = self.first(x)
        b = self.second(a)
        return [a, b, b.mean(dim=(2, 3))]


class ConvBnResidual(ConvBn):
    """ConvBn with a residual add, as in MobileNetV2 and ResNet: optimize_for_inference hands the add
    to oneDNN's binary kernel, which divides by the L1 size it computed (onednn_cache_view.hpp)."""

    def __init__(self, in_ch: int = 3):
        super().__init__(in_ch)
        self.residual = nn.Sequential(*ConvBn.block(16, 16, 1)[:2])

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        a = self.first(x)
        a = a + self.residual(a)
        b = self.second(a)
        return [a, b, b.mean(dim=(2, 3))]


class BadRank(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(1, 2, 3))


class BadTokens(nn.Module):
    """13 tokens for 32x32 crops: N - K is no square grid for any K <= 8."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(2)[:, :, :13].transpose(1, 2)


class AmbiguousTokens(nn.Module):
    """16 tokens for 12x12 crops: 0 prefix + 4x4 patches of 3 px, or 7 prefix + 3x3 patches of 4 px."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(2)[:, :, :16].transpose(1, 2).contiguous()


class BadRank6(nn.Module):
    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        return [x, x.unsqueeze(1).unsqueeze(1)]


class BadBatch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:1]


class BadType(nn.Module):
    def forward(self, x: torch.Tensor) -> int:
        return 3


class NonFinite(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # NaN where the crop's mean input is above 0: only some crops fail.
        m = x.mean(dim=(1, 2, 3), keepdim=True)
        return torch.where(m > 0, torch.full_like(x, float("nan")), x)


class ZeroChannels(nn.Module):
    """A map with no channel, and a vector beside it."""

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        return [x.mean(dim=(2, 3)), x[:, :0]]


class ZeroTokens(nn.Module):
    """ViT-like tokens [B, 0, D]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(2)[:, :, :0].transpose(1, 2).contiguous()


class BadKey(nn.Module):
    """A dict key that cannot be an HDF5 dataset name under /levels."""

    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"stage/1": x.mean(dim=(2, 3))}


class ShapeChanges(nn.Module):
    """Feature width alternates from one call to the next."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x.mean(dim=(2, 3)).repeat(1, 1 + self.calls % 2)


class Unfreezable(nn.Module):
    """A batch norm (something for --optimize to fold) and two list attributes that hold one
    tensor, which torch.jit.freeze refuses ("module contains attributes values that overlaps"):
    --optimize then refuses it in one line. (A module list indexed at run time is refused
    too, but loading any module with an interface type leaks a reference cycle inside LibTorch,
    which the sanitizer leg would report.)"""

    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm2d(3)
        shared = torch.ones(1)
        self.scales: List[torch.Tensor] = [shared]
        self.shifts: List[torch.Tensor] = [shared]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x).mean(dim=(2, 3)) * self.scales[0] + self.shifts[0]


class ProbeBackbone(nn.Module):
    """scripts/bench_probe.sh: a small CNN from 3x96x96 images to levels 96x6x6 and 1280x3x3."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 32, 3, 2, 1), nn.Conv2d(32, 64, 3, 2, 1)
        self.c3, self.c4 = nn.Conv2d(64, 96, 3, 2, 1), nn.Conv2d(96, 96, 3, 2, 1)
        self.c5 = nn.Conv2d(96, 1280, 3, 2, 1)

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        a = F.relu(self.c4(F.relu(self.c3(F.relu(self.c2(F.relu(self.c1(x))))))))
        return [a, F.relu(self.c5(a))]


# A torch 2.x ViT calls scaled_dot_product_attention (timm's fused attention, Hugging Face's SDPA);
# torch 1.13 has no such function, so there the fixture ViT computes attention by hand.
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


class EagerAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1) @ v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        out = self.attend(qkv[0], qkv[1], qkv[2])
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class FusedAttention(EagerAttention):
    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, fused: bool):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = FusedAttention(dim, heads) if fused else EagerAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyViT(nn.Module):
    """A ViT shaped like timm's: patch embedding, class token, position embedding, pre-norm
    blocks. Returns each block's patch tokens as a [B, C, H/p, W/p] map and the final class token."""

    def __init__(self, in_ch: int = 3, image: int = 32, patch: int = 8, dim: int = 32, depth: int = 2,
                 heads: int = 4, fused: bool = HAS_SDPA):
        super().__init__()
        self.patch = patch
        self.embed = nn.Conv2d(in_ch, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 1 + (image // patch) ** 2, dim) * 0.02)
        self.blocks = nn.ModuleList([Block(dim, heads, fused) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        b, h, w = x.shape[0], x.shape[2] // self.patch, x.shape[3] // self.patch
        t = self.embed(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(b, -1, -1), t], dim=1) + self.pos
        levels: List[torch.Tensor] = []
        for block in self.blocks:
            t = block(t)
            levels.append(t[:, 1:].transpose(1, 2).reshape(b, -1, h, w))
        levels.append(self.norm(t)[:, 0])
        return levels


class ViTRegisters(TinyViT):
    """A ViT with a class token and 4 register tokens that returns two blocks' raw tokens
    [B, 1 + 4 + N, D], as DINOv2-style models are exported: embcache cuts them itself."""

    def __init__(self, in_ch: int = 3, image: int = 32, patch: int = 8, dim: int = 32):
        super().__init__(in_ch, image, patch, dim, depth=2, heads=4)
        self.registers = nn.Parameter(torch.randn(1, 4, dim) * 0.02)

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        b = x.shape[0]
        t = self.embed(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(b, -1, -1), t], dim=1) + self.pos
        t = torch.cat([t[:, :1], self.registers.expand(b, -1, -1), t[:, 1:]], dim=1)
        levels: List[torch.Tensor] = []
        for block in self.blocks:
            t = block(t)
            levels.append(t)
        return levels


class PatchCopy(nn.Module):
    """Tokens that are copies of the input: a class token (the per-channel crop mean), 4 register
    tokens of constants, then each 4x4 patch's pixels in row-major patch order. Its token levels
    must equal a Python reshape bit for bit."""

    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        b, c, h, w = x.shape
        p = 4
        patches = x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // p) * (w // p), c * p * p)
        cls = x.mean(dim=(2, 3)).repeat(1, p * p).unsqueeze(1)
        registers = torch.arange(4, dtype=x.dtype).view(1, 4, 1).expand(b, 4, c * p * p)
        return {"tokens": torch.cat([cls, registers, patches], dim=1)}


class ChannelsLast(nn.Module):
    """A Swin-style output [B, H, W, C] beside a channels-first one."""

    def __init__(self, in_ch: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, 6, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        y = self.conv(x)
        return [y.permute(0, 2, 3, 1).contiguous(), y]


class Temporal(nn.Module):
    """A multi-temporal encoder on [B, T, C, h, w]: per-timestep maps [B, T, C', H, W], Prithvi's
    flattened temporal tokens [B, 1 + T*(h/8)*(w/8), D], and a time-pooled vector."""

    def __init__(self, in_ch: int = 3, dim: int = 8, patch: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, 4, 3, stride=2, padding=1)
        self.embed = nn.Conv2d(in_ch, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim))

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        b, t = x.shape[0], x.shape[1]
        flat = x.reshape(b * t, x.shape[2], x.shape[3], x.shape[4])
        maps = torch.relu(self.conv(flat))
        maps = maps.reshape(b, t, maps.shape[1], maps.shape[2], maps.shape[3])
        tokens = self.embed(flat).flatten(2).transpose(1, 2)  # [B*T, N, D]
        tokens = tokens.reshape(b, t * tokens.shape[1], tokens.shape[2])
        tokens = torch.cat([self.cls.expand(b, -1, -1), tokens], dim=1)
        return [maps, tokens, maps.mean(dim=(1, 3, 4))]


def export_encoders(out_dir: str, in_ch: int) -> None:
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    example = torch.randn(2, in_ch, 32, 32)
    multi = TinyMulti(in_ch).eval()
    torch.jit.save(torch.jit.script(multi), os.path.join(out_dir, "multi_scripted.pt"))
    traced = torch.jit.trace(multi, example, check_inputs=[(torch.randn(5, in_ch, 32, 32),)], strict=False)
    torch.jit.save(traced, os.path.join(out_dir, "multi_traced.pt"))
    torch.jit.save(torch.jit.script(TinyDict(in_ch).eval()), os.path.join(out_dir, "dict_scripted.pt"))
    torch.jit.save(torch.jit.script(Single(in_ch).eval()), os.path.join(out_dir, "single_scripted.pt"))
    in_place = InPlace(in_ch).eval()
    torch.jit.save(torch.jit.script(in_place), os.path.join(out_dir, "in_place.pt"))
    doubled = Doubled(in_ch).eval()
    doubled.load_state_dict(in_place.state_dict())
    torch.jit.save(torch.jit.script(doubled), os.path.join(out_dir, "doubled.pt"))
    torch.jit.save(torch.jit.script(Light(in_ch).eval()), os.path.join(out_dir, "light.pt"))
    torch.jit.save(torch.jit.script(Heavy(in_ch).eval()), os.path.join(out_dir, "heavy.pt"))
    torch.jit.save(torch.jit.script(Heavy(in_ch, 64, 128, 6, pooled=True).eval()), os.path.join(out_dir, "bench_heavy.pt"))
    torch.jit.save(torch.jit.script(ProbeBackbone().eval()), os.path.join(out_dir, "bench_probe.pt"))
    torch.jit.save(torch.jit.script(ConvBn(in_ch).eval()), os.path.join(out_dir, "conv_bn.pt"))
    torch.jit.save(torch.jit.script(ConvBnResidual(in_ch).eval()), os.path.join(out_dir, "conv_bn_residual.pt"))
    vit = TinyViT(in_ch).eval()
    torch.jit.save(torch.jit.script(vit), os.path.join(out_dir, "vit_scripted.pt"))
    traced = torch.jit.trace(vit, example, check_inputs=[(torch.randn(5, in_ch, 32, 32),)], strict=False)
    torch.jit.save(traced, os.path.join(out_dir, "vit_traced.pt"))
    registers = ViTRegisters(in_ch).eval()
    torch.jit.save(torch.jit.script(registers), os.path.join(out_dir, "vit_registers_scripted.pt"))
    traced = torch.jit.trace(registers, example, check_inputs=[(torch.randn(5, in_ch, 32, 32),)], strict=False)
    torch.jit.save(traced, os.path.join(out_dir, "vit_registers_traced.pt"))
    torch.jit.save(torch.jit.script(PatchCopy()), os.path.join(out_dir, "patch_copy.pt"))
    torch.jit.save(torch.jit.script(ChannelsLast(in_ch).eval()), os.path.join(out_dir, "channels_last.pt"))
    temporal = Temporal(in_ch).eval()
    torch.jit.save(torch.jit.script(temporal), os.path.join(out_dir, "temporal_scripted.pt"))
    series = torch.randn(2, 3, in_ch, 32, 32)
    traced = torch.jit.trace(temporal, series, check_inputs=[(torch.randn(5, 3, in_ch, 32, 32),)], strict=False)
    torch.jit.save(traced, os.path.join(out_dir, "temporal_traced.pt"))
    with open(os.path.join(out_dir, "vit_attention.txt"), "w") as f:
        f.write(("scaled_dot_product_attention" if HAS_SDPA else "eager") + f" torch {torch.__version__}\n")
    for name, module in [("bad_rank", BadRank()), ("bad_tokens", BadTokens()), ("ambiguous_tokens", AmbiguousTokens()), ("bad_rank6", BadRank6()), ("bad_batch", BadBatch()), ("bad_type", BadType()),
                         ("nonfinite", NonFinite()), ("shape_changes", ShapeChanges()),
                         ("bad_key", BadKey()), ("unfreezable", Unfreezable()), ("zero_channels", ZeroChannels()),
                         ("zero_tokens", ZeroTokens())]:
        torch.jit.save(torch.jit.script(module), os.path.join(out_dir, name + ".pt"))
    with open(os.path.join(out_dir, "not_torchscript.pt"), "wb") as f:
        f.write(b"this is not a torchscript archive")
    # Saved in training mode, as a user who forgets model.eval() does (last: the random numbers
    # the other fixtures' weights come from are drawn before these).
    train_mode = TrainMode(in_ch).train()
    torch.jit.save(torch.jit.script(train_mode), os.path.join(out_dir, "train_scripted.pt"))
    torch.jit.save(torch.jit.trace(train_mode, example, check_trace=False), os.path.join(out_dir, "train_traced.pt"))


class TrainMode(nn.Module):
    """Batch norm, dropout and a stochastic depth as torchvision writes it (a Bernoulli mask per
    crop, only while training). Scripted, eval() turns them off; traced in training mode, they
    are recorded as they ran and stay."""

    def __init__(self, in_ch: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        y = torch.relu(self.bn(self.conv(x)))
        if self.training:
            y = y * torch.empty([y.shape[0], 1, 1, 1]).bernoulli_(0.9)
        return [self.drop(y)]


# ---------------------------------------------------------------- datasets
def make_dataset(path: str, n: int, channels: int, height: int, width: int, dtype: str,
                 labels: str, masks: bool, seed: int, groups: int, splits: bool,
                 duplicate_names: bool = False, time_steps: int = 0) -> None:
    rng = np.random.default_rng(seed)
    if dtype == "uint8":
        images = rng.integers(0, 256, size=(n, channels, height, width), dtype=np.uint8)
    elif dtype == "uint16":
        images = rng.integers(0, 10000, size=(n, channels, height, width), dtype=np.uint16)
    elif dtype == "int16":
        images = rng.integers(-2000, 2000, size=(n, channels, height, width), dtype=np.int16)
    elif dtype == "int32":
        images = rng.integers(-100000, 100000, size=(n, channels, height, width), dtype=np.int32)
    else:
        images = rng.standard_normal(size=(n, channels, height, width)).astype(np.float32)
    if time_steps > 0:  # [N, T, C, H, W]: each step the first image shifted by one pixel more
        images = np.stack([np.roll(images, t, axis=3) for t in range(time_steps)], axis=1)
    str_dt = h5py.string_dtype("utf-8")
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=images, chunks=(1,) + images.shape[1:])
        names = [f"win{i % max(1, n // groups) if groups > 1 else i}" for i in range(n)]
        if duplicate_names:
            names[-1] = names[0]
        f.create_dataset("names", data=names, dtype=str_dt)
        if groups > 1:
            f.create_dataset("groups", data=[f"g{i // max(1, n // groups)}" for i in range(n)], dtype=str_dt)
        if splits:
            f.create_dataset("splits", data=[["train", "train", "val", "test"][i % 4] for i in range(n)], dtype=str_dt)
        if labels == "class":
            f.create_dataset("labels", data=rng.integers(0, 5, size=n, dtype=np.int64))
        elif labels == "value":
            f.create_dataset("labels", data=rng.standard_normal(size=n).astype(np.float32))
        elif labels == "vector":
            f.create_dataset("labels", data=rng.standard_normal(size=(n, 3)).astype(np.float32))
        if masks:
            m = f.create_dataset("masks", data=rng.integers(0, 4, size=(n, height, width), dtype=np.uint8))
            m.attrs["ignore_index"] = 255


# ---------------------------------------------------------------- reference checks
def crop_starts(begin: int, end: int, size: int, overlap: int) -> List[int]:
    stride = size - overlap
    starts = [begin]
    s = begin + stride
    while s < end - size:
        starts.append(s)
        s += stride
    if end - size > begin:
        starts.append(end - size)
    return starts


def reference_crops(width: int, height: int, crop_w, crop_h, overlap: int):
    if crop_w is None:
        return [(0, 0, width, height)]
    return [(x, y, x + crop_w, y + crop_h)
            for x in crop_starts(0, width, crop_w, overlap)
            for y in crop_starts(0, height, crop_h, overlap)]


def compare(args) -> int:
    """Recompute every cached crop in Python and compare level by level.

    Crops are rebuilt from the dataset independently (grid, padding, bands, normalisation) and
    run through the encoder in the cache's row order, grouped by --batch-size, which is the
    order and grouping a fresh precompute used: oneDNN may pick other kernels for other batch
    sizes, and the pooled levels of some encoders make that visible at 1e-5.
    """
    crop_w = crop_h = None
    if args.crop_size:
        parts = args.crop_size.lower().split("x")
        crop_w, crop_h = int(parts[0]), int(parts[-1])
    mean = torch.tensor([float(v) for v in args.mean.split(",")], dtype=torch.float32)
    std = torch.tensor([float(v) for v in args.std.split(",")], dtype=torch.float32)
    enc = torch.jit.load(args.encoder).eval()
    # rslearn caches key crops in absolute pixel coordinates: origins maps "group/name" to the
    # window's (x1, y1), and the dataset holds the window's pixels from that corner.
    origins = json.load(open(args.origins)) if args.origins else {}
    with h5py.File(args.dataset, "r") as d, h5py.File(args.cache, "r") as c:
        images = d["images"]
        n, ch, h, w = images.shape[0], images.shape[-3], images.shape[-2], images.shape[-1]
        temporal = images.ndim == 5
        names = [s.decode() if isinstance(s, bytes) else s for s in d["names"][:]] if "names" in d else [f"w{i}" for i in range(n)]
        groups = [s.decode() if isinstance(s, bytes) else s for s in d["groups"][:]] if "groups" in d else ["default"] * n
        bands = [int(b) for b in args.bands.split(",")] if args.bands else list(range(ch))
        expected = {}
        for i in range(n):
            ox, oy = origins.get(f"{groups[i]}/{names[i]}", (0, 0))
            for b in reference_crops(w, h, crop_w, crop_h, args.overlap):
                expected[(groups[i], names[i], (b[0] + ox, b[1] + oy, b[2] + ox, b[3] + oy))] = i
        cwin = [s.decode() for s in c["index/window"][:]]
        cgrp = [s.decode() for s in c["index/group"][:]]
        cb = c["index/bounds"][:]
        keys = [(cgrp[r], cwin[r], tuple(int(v) for v in cb[r])) for r in range(len(cwin))]
        if sorted(keys) != sorted(expected):
            print(f"cache keys differ from the expected crops: {len(set(keys) - set(expected))} unexpected, "
                  f"{len(set(expected) - set(keys))} missing", file=sys.stderr)
            return 1
        level_names = list(c["levels"].keys())
        int8 = c.attrs.get("dtype") in ("int8", b"int8")
        worst_int8 = 0.0

        def crop_input(key):
            i = expected[key]
            ox, oy = origins.get(f"{key[0]}/{key[1]}", (0, 0))
            x1, y1, x2, y2 = key[2][0] - ox, key[2][1] - oy, key[2][2] - ox, key[2][3] - oy
            raw = torch.from_numpy(images[i].astype(np.int32) if images.dtype == np.uint16 else images[i])
            raw = raw[:, bands] if temporal else raw[bands]
            crop = torch.full(raw.shape[:-2] + (y2 - y1, x2 - x1), float(args.pad_value), dtype=torch.float32)
            xe, ye = min(x2, w), min(y2, h)
            crop[..., : ye - y1, : xe - x1] = raw[..., y1:ye, x1:xe].to(torch.float32)
            x = crop * args.scale if args.scale != 1.0 else crop
            return (x - mean.view(-1, 1, 1)) / std.view(-1, 1, 1)

        worst = 0.0
        for start in range(0, len(keys), args.batch_size):
            rows = list(range(start, min(start + args.batch_size, len(keys))))
            out = enc(torch.stack([crop_input(keys[r]) for r in rows]))
            if isinstance(out, torch.Tensor):
                outs = {"0": out}
            elif isinstance(out, dict):
                outs = out
            else:
                outs = {str(k): v for k, v in enumerate(out)}
            for name in level_names:
                ds = c["levels"][name]
                got = torch.from_numpy(ds[rows[0]:rows[-1] + 1].astype(np.float32))
                want = stored_level(ds.attrs, outs, name, crop_h or h).to(torch.float32)
                if got.shape != want.shape:
                    print(f"level {name}: shape {tuple(got.shape)} != {tuple(want.shape)}", file=sys.stderr)
                    return 1
                if int8:
                    # x ~= q * scale with |x - q * scale| <= scale / 2 (docs/cache-format.md)
                    scale = torch.from_numpy(c["scales"][name][rows[0]:rows[-1] + 1])
                    scale = scale.reshape(scale.shape + (1,) * (got.dim() - scale.dim()))
                    excess = ((got * scale - want).abs() - scale / 2).max()
                    worst_int8 = max(worst_int8, float(excess / max(float(want.abs().max()), 1e-12)))
                    continue
                err = float((got - want).abs().max()) / max(float(want.abs().max()), 1e-12)
                worst = max(worst, err)
    if int8:
        print(json.dumps({"rows": len(keys), "max_excess_over_half_scale": worst_int8}))
        if worst_int8 > args.tolerance:
            print(f"int8 error exceeds scale/2 by {worst_int8} (relative) > {args.tolerance}", file=sys.stderr)
            return 1
        return 0
    print(json.dumps({"rows": len(keys), "max_relative_error": worst}))
    if worst > args.tolerance:
        print(f"max relative error {worst} > {args.tolerance}", file=sys.stderr)
        return 1
    return 0


def stored_level(attrs, outs, name: str, crop_h: int) -> torch.Tensor:
    """What embcache stores for a level, computed from the encoder's outputs by the rule of
    docs/encoders.md with plain torch reshapes."""
    def attr(key, default):
        v = attrs.get(key, default)
        return v.decode() if isinstance(v, bytes) else v
    source = attr("source", "map")
    t = outs[attr("source_output", name)]
    if source in ("map", "vector"):
        return t
    if source == "channels_last":
        return t.permute(0, 3, 1, 2)
    k, p, steps = int(attr("prefix_tokens", 0)), int(attr("patch_size", 0)), int(attr("time_steps", 0))
    axis = 2 if t.dim() == 4 else 1
    if source in ("class_token", "prefix_token"):
        return t.select(axis, int(attr("token", 0)))
    b, d = t.shape[0], t.shape[-1]
    gh = crop_h // p
    patches = t.narrow(axis, k, t.shape[axis] - k)
    if steps:
        gw = patches.shape[axis] // (gh * (steps if axis == 1 else 1))
        return patches.reshape(b, steps, gh, gw, d).permute(0, 1, 4, 2, 3)
    gw = patches.shape[1] // gh
    return patches.reshape(b, gh, gw, d).permute(0, 3, 1, 2)


def read_cache_by_key(path: str):
    with h5py.File(path, "r") as c:
        win = [s.decode() for s in c["index/window"][:]]
        grp = [s.decode() for s in c["index/group"][:]]
        b = c["index/bounds"][:]
        keys = [(grp[i], win[i], tuple(int(v) for v in b[i])) for i in range(len(win))]
        levels = {name: c["levels"][name][:] for name in c["levels"].keys()}
        labels = {name: c["labels"][name][:] for name in c["labels"].keys()} if "labels" in c else {}
    return keys, levels, labels


def same(args) -> int:
    """Two caches hold the same keys with bit-identical features and labels."""
    ka, la, lba = read_cache_by_key(args.a)
    kb, lb, lbb = read_cache_by_key(args.b)
    if len(set(ka)) != len(ka) or len(set(kb)) != len(kb):
        print("duplicate keys in a cache", file=sys.stderr)
        return 1
    if set(ka) != set(kb):
        print(f"key sets differ: {len(set(ka) - set(kb))} only in a, {len(set(kb) - set(ka))} only in b", file=sys.stderr)
        return 1
    order_b = {k: i for i, k in enumerate(kb)}
    perm = np.array([order_b[k] for k in ka])
    for name in la:
        if not np.array_equal(la[name].view(np.uint8), lb[name][perm].view(np.uint8)):
            print(f"level {name} differs", file=sys.stderr)
            return 1
    for name in lba:
        if not np.array_equal(lba[name], lbb[name][perm]):
            print(f"labels {name} differ", file=sys.stderr)
            return 1
    print(json.dumps({"rows": len(ka), "identical": True}))
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("encoders")
    e.add_argument("out_dir")
    e.add_argument("--channels", type=int, default=3)
    v = sub.add_parser("vit-archive", help="the committed tests/data ViT that calls scaled_dot_product_attention")
    v.add_argument("out")
    d = sub.add_parser("dataset")
    d.add_argument("out")
    d.add_argument("--n", type=int, default=8)
    d.add_argument("--channels", type=int, default=3)
    d.add_argument("--height", type=int, default=40)
    d.add_argument("--width", type=int, default=48)
    d.add_argument("--dtype", default="uint8")
    d.add_argument("--labels", default="class")
    d.add_argument("--masks", action="store_true")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--groups", type=int, default=1)
    d.add_argument("--splits", action="store_true")
    d.add_argument("--duplicate-names", action="store_true")
    d.add_argument("--time-steps", type=int, default=0, help="write /images as [N, T, C, H, W]")
    c = sub.add_parser("compare")
    c.add_argument("cache")
    c.add_argument("dataset")
    c.add_argument("encoder")
    c.add_argument("--crop-size", default="")
    c.add_argument("--overlap", type=int, default=0)
    c.add_argument("--origins", default="", help="JSON: {\"group/name\": [x1, y1]} for absolute crop keys")
    c.add_argument("--pad-value", type=float, default=0.0)
    c.add_argument("--scale", type=float, default=1.0)
    c.add_argument("--mean", default="0")
    c.add_argument("--std", default="1")
    c.add_argument("--bands", default="")
    c.add_argument("--tolerance", type=float, default=1e-6)
    c.add_argument("--batch-size", type=int, default=1)
    s = sub.add_parser("same")
    s.add_argument("a")
    s.add_argument("b")
    args = p.parse_args()
    if args.cmd == "encoders":
        export_encoders(args.out_dir, args.channels)
        return 0
    if args.cmd == "dataset":
        make_dataset(args.out, args.n, args.channels, args.height, args.width, args.dtype, args.labels,
                     args.masks, args.seed, args.groups, args.splits, args.duplicate_names, args.time_steps)
        return 0
    if args.cmd == "vit-archive":
        if not HAS_SDPA:
            print(f"torch {torch.__version__} has no scaled_dot_product_attention; run this with torch >= 2.1", file=sys.stderr)
            return 1
        torch.manual_seed(1)
        torch.jit.save(torch.jit.script(TinyViT(dim=16, depth=1, heads=2).eval()), args.out)
        return 0
    if args.cmd == "compare":
        return compare(args)
    return same(args)


if __name__ == "__main__":
    sys.exit(main())
