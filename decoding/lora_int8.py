"""LoRA weights stored as int8 with one float32 scale per row (or column), gzipped: half the bytes
of fp16 at an error of at most half a quantization step. The CLLM campaign commits its training
checkpoints in this form, and a LoRA adapter folder may hold its weights this way
(``lora_int8.safetensors.gz`` and parts, instead of peft's ``adapter_model.safetensors``);
``decoding.model`` loads either."""

from __future__ import annotations

import gzip
import math
import os
from pathlib import Path

WEIGHTS = "lora_int8.safetensors.gz"
SCALE = ".scale"  # a weight's per-row scale beside it
PART_BYTES = 6_000_000  # raw bytes per file: a rank-16 LoRA of the bundled model (5.1 MB raw, 4.6 MB
# gzipped) stays one file; a larger rank is split into files under the repo's 5 MB a file


def quantize_rows(w):
    """(int8 tensor, float32 scales): w ~ q * scale with one scale per row or per column, whichever
    are fewer (a LoRA matrix has r of one of them), each row's (column's) largest |w| at 127, a zero
    one at scale 1. The error is at most half a step: |w - q * scale| <= scale / 2."""
    import torch

    w2 = w.float().reshape(w.shape[0], -1) if w.dim() else w.float().reshape(1, 1)
    axis = 1 if w2.shape[0] <= w2.shape[1] else 0  # reduce over the longer side: few scales
    scale = w2.abs().amax(dim=axis, keepdim=True) / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w2 / scale).clamp(-127, 127).to(torch.int8)
    return q.reshape(w.shape).contiguous(), scale.contiguous()


def dequantize_rows(q, scale):
    return (q.float().reshape(q.shape[0], -1) * scale).reshape(q.shape) if q.dim() else q.float() * scale.reshape(())


def part_name(i: int) -> str:
    return WEIGHTS if i == 0 else WEIGHTS.replace(".safetensors", f".part{i}.safetensors")


def write_int8_weights(d: Path, tensors: dict) -> None:
    """The int8 tensors (each with its SCALE) gzipped into ``d``: one file (WEIGHTS) or, above
    PART_BYTES, parts of about equal size (lora_int8.safetensors.gz, lora_int8.part1.safetensors.gz,
    ...), a tensor and its scale always in the same part; parts an earlier, larger save left are
    removed."""
    from safetensors.torch import save as to_bytes

    names = [k for k in tensors if not k.endswith(SCALE)]
    size = {k: tensors[k].nbytes + tensors[k + SCALE].nbytes for k in names}
    n_parts = max(1, math.ceil(sum(size.values()) / PART_BYTES))
    target, parts, filled = sum(size.values()) / n_parts, [{}], 0
    for k in names:
        if parts[-1] and filled + size[k] > target * len(parts) and len(parts) < n_parts:
            parts.append({})
        parts[-1][k], parts[-1][k + SCALE] = tensors[k], tensors[k + SCALE]
        filled += size[k]
    d.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(parts):
        tmp = d / (part_name(i) + ".tmp")
        with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
            gz.write(to_bytes(part))  # gzip: the header's names and the int8 values, 10% smaller
        os.replace(tmp, d / part_name(i))
    i = len(parts)
    while (d / part_name(i)).is_file():
        (d / part_name(i)).unlink()
        i += 1


def remove_weights(d: Path) -> None:
    """Remove an adapter's weight files from ``d`` (peft's adapter_model*.safetensors and the int8
    parts), so that a folder written again holds no stale weights beside the new ones."""
    for pattern in ("adapter_model*.safetensors", "lora_int8*.safetensors.gz"):
        for f in d.glob(pattern):
            f.unlink()


def read_int8_weights(d: Path) -> dict:
    """All parts ``write_int8_weights`` wrote in ``d``, as one dict of tensors ({} if none)."""
    from safetensors.torch import load

    out, i = {}, 0
    while (d / part_name(i)).is_file():
        out.update(load(gzip.decompress((d / part_name(i)).read_bytes())))
        i += 1
    return out


def quantized(tensors: dict) -> dict:
    """Every float tensor of ``tensors`` as its int8 form and SCALE (``quantize_rows``)."""
    out = {}
    for k, w in tensors.items():
        out[k], out[k + SCALE] = quantize_rows(w)
    return out


def dequantized(tensors: dict) -> dict:
    """The float32 weights of an int8 dict (``read_int8_weights``), under their own names."""
    return {k: dequantize_rows(q, tensors[k + SCALE]) for k, q in tensors.items() if not k.endswith(SCALE)}
