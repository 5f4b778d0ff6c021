"""The few-row product kernel (decoding/csrc/fewrows.cpp): built once per machine, loaded as torch ops.

A decoding step multiplies each weight matrix by a handful of token vectors. The BLAS libraries
torch calls are built for many rows: on this lab's Intel CPU (2 cores, AVX-512, fp32) MKL takes
the bundled model's 211 products at 21 ms for one row, the time to read the weights once, but
35 ms at four rows and 44 ms at eight; oneDNN's packed product 32 and 38 ms; inductor's C++
GEMM templates (``torch.compile`` under max-autotune) were slower than MKL at every shape we
tried. The kernel here streams each weight once for all the rows (panels of 32 output columns
packed once at load, the rows' accumulators in vector registers, software prefetch): 22 ms at
one row, 25-26 at four, 28-29 at eight (``scripts/kernel_products.py``, docs/benchmarks.md).
And its products are row invariant: each row's result is the same chain of fused
multiply-adds over k whatever the other rows are, so a step feeding eight tokens computes each
token's products bit for bit as an AR step does.

It is compiled from source with the C++ compiler torch.compile uses (``-march=native``: the
code is for this CPU) into the lab's cache folder on first use (about 25 s), and loaded from there
afterwards. Where it cannot be built (no compiler, no ninja, another OS) ``ops()`` returns None and
``why()`` says why; decoding/kernels.py then keeps to its other kernels.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import torch

from .paths import cpu_name

SOURCE = Path(__file__).parent / "csrc" / "fewrows.cpp"
FLAGS = ("-O3", "-march=native", "-ffp-contract=fast", "-fopenmp")
NAMESPACE = "pdl_fewrows"
MAX_ROWS = 32  # rows in one pass of the kernel (a decoding step); more in passes up to kernels.row_limit, then F.linear

_lock = threading.Lock()
_loaded: dict[str, Any] = {}  # namespace -> torch.ops namespace, or the exception that stopped it


class FewRowsError(RuntimeError):
    """The kernel could not be built or loaded here."""


def build_key(flags: tuple[str, ...] = FLAGS, namespace: str = NAMESPACE) -> str:
    """What a built library depends on: the source, the flags, the namespace, this CPU and torch."""
    h = hashlib.sha256(SOURCE.read_bytes())
    h.update("|".join((*flags, namespace, cpu_name(), torch.__version__, platform.python_version())).encode())
    return h.hexdigest()[:16]


def _build(flags: tuple[str, ...], namespace: str, progress: Callable[[str], None] | None):
    from torch.utils import cpp_extension

    from .paths import cache_dir

    if shutil.which("ninja") is None:  # the pip package's ninja, beside this interpreter (a venv not activated)
        os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    key = build_key(flags, namespace)
    folder = cache_dir() / "ext" / f"fewrows-{key}"
    folder.mkdir(parents=True, exist_ok=True)
    if progress is not None and not (folder / f"{namespace}_{key}.so").exists():
        progress("building the few-row product kernel for this CPU (once per machine, about 25 s)")
    cpp_extension.load(name=f"{namespace}_{key}", sources=[str(SOURCE)], build_directory=str(folder),
                       extra_cflags=[*flags, f"-DFEWROWS_NS={namespace}"], extra_ldflags=["-fopenmp"],
                       is_python_module=False, verbose=False)
    ops = getattr(torch.ops, namespace)

    @torch.library.register_fake(f"{namespace}::linear")
    def _(x, packed, bias, n, rows=0):
        return x.new_empty((x.shape[0], n))

    return ops


def ops(progress: Callable[[str], None] | None = None, flags: tuple[str, ...] = FLAGS,
        namespace: str = NAMESPACE):
    """The kernel's ops (``pack(weight)``, ``linear(x, packed, bias, n, rows=0)``, ``panel_width()``),
    built or loaded on first use; None where that failed (``why()`` says why; not tried again in
    this process). ``flags``/``namespace``: another build of the same source (tests build one
    without AVX-512 under its own namespace)."""
    with _lock:
        if namespace not in _loaded:
            t = time.perf_counter()
            try:
                _loaded[namespace] = _build(tuple(flags), namespace, progress)
            except Exception as e:  # noqa: BLE001 (a compiler, linker or loader failure of any kind)
                _loaded[namespace] = FewRowsError(f"{type(e).__name__}: {_first_line(e)}")
            _loaded[f"{namespace}:seconds"] = time.perf_counter() - t
        got = _loaded[namespace]
    return None if isinstance(got, Exception) else got


def why(namespace: str = NAMESPACE) -> str:
    """Why the kernel is not available here ("" where it is, or was not tried yet)."""
    got = _loaded.get(namespace)
    return str(got) if isinstance(got, Exception) else ""


def _first_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    err = next((ln for ln in lines if "error" in ln.lower()), lines[0] if lines else "")
    return err[:300]
