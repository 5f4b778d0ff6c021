"""The linear layers' products for decoding steps on the CPU: which kernel, and why.

A decoding step multiplies every weight matrix of the model by a handful of token vectors (1 for
an AR step, 2-32 for a parallel step); the products are bound by reading the weights from memory,
so the right kernel streams each weight once for all the rows. ``torch.nn.functional.linear``
(``x @ W.T``, MKL on x86) does that at one row on some CPUs and not on others, and no library
product does it for a few rows. The kernels (``KERNELS``), measured per machine:

- "stock": ``F.linear``. On the Intel Xeon (AVX-512) of the later sessions MKL's one-row product
  is at the memory floor; past one row it reads the weights several times.
- "skinny": ``W @ x.T`` with ``x`` contiguous for at most 11 rows or a multiple of 8 up to
  ``MAX_ROWS`` (``skinny_rows``; one row fed as two). On the 2-core AMD EPYC of the first sessions
  MKL's matrix-vector path took 45 ms for the 135M model's products at one row, 72 at two, where
  reading the weights once took 17 ms; the skinny product took 18 ms at one or two rows, 25 at four,
  44 at eight. On the Intel CPU it is the slow one (2.6x).
- "onednn": the skinny product for one and two rows, oneDNN's packed GEMM past them (torch's
  ``mkldnn._linear_pointwise`` over a weight reordered once: what inductor emits for a prepacked
  linear), prefills included; each weight packed once at load (a second copy in memory, repacked
  when the weight changes); ``onednn_gain`` measures it at ``ONEDNN_PROBE_ROWS`` rows.
- "fewrows": a small C++ kernel (decoding/fewrows.py, decoding/csrc/fewrows.cpp) built for this CPU
  on first use: each weight packed once into column panels, streamed once for 1-32 rows with their
  accumulators in registers, row invariant (each row's result is the one-row product's, bit for
  bit); more rows in passes of 32 up to where ``F.linear`` measures faster (``row_limit``, per
  machine); longer prefills, gradients and other dtypes go to ``F.linear``. ``fewrows_gain``
  measures it.

``use_skinny(model, kernel)`` installs one of them on every ``nn.Linear`` of the model; "auto"
(``auto_choice``) measures on the model's largest weight and keeps the choice per machine in the
cache folder (``choice_file``: a measurement on a busy machine, which can pick the stock kernel by
noise, does not overrule one made on a quiet one). The kernels apply under
``torch.inference_mode``/``no_grad`` (training keeps ``F.linear``). Every forward of the lab goes
through the model's kernel, plain AR steps too, so a speedup over AR is never a speedup over a
slowed-down AR. Results differ from ``F.linear`` by float rounding only (another summation order),
like any change of kernel.
"""

from __future__ import annotations

import json
import os
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F

from .fewrows import MAX_ROWS as FEW_ROWS
from .paths import cpu_name

MAX_ROWS = 32
KERNELS = ("auto", "fewrows", "onednn", "skinny", "stock")
ONEDNN_PROBE_ROWS = 8  # the rows "auto" compares oneDNN and the skinny product at (a budget's typical fed size)
PACK_ROWS = 8  # the row count oneDNN's weight layout is chosen for (it serves every count)
_mm, _cat, _linear, _grad_enabled = torch.mm, torch.cat, F.linear, torch.is_grad_enabled
try:
    _pointwise, _reorder = torch.ops.mkldnn._linear_pointwise, torch.ops.mkldnn._reorder_linear_weight
except (AttributeError, RuntimeError):  # a torch built without mkldnn
    _pointwise = _reorder = None


if _pointwise is not None:
    @torch.library.custom_op("decoding::onednn_linear", mutates_args=())
    def onednn_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, out_features: int) -> torch.Tensor:
        """oneDNN's packed product as one opaque operator, so a compiled step (decoding.compiled)
        calls it as it is instead of lowering it (inductor's lowering rejects a weight packed
        outside the graph)."""
        return _pointwise(x, packed, bias, "none", [], "")

    @onednn_linear.register_fake
    def _(x, packed, bias, out_features):
        return x.new_empty((x.shape[0], out_features))


def refresh_packs(model) -> int:
    """Pack again every weight changed in place since it was packed (a compiled step checks this
    before a run, not inside its graph); how many it packed."""
    n = 0
    for m in model.modules():
        if hasattr(m, "_onednn") and m._onednn[1] != m.weight._version:
            pack(m)
            n += 1
        if hasattr(m, "_fewrows") and m._fewrows[1] != m.weight._version:
            pack_fewrows(m)
            n += 1
    return n


def skinny_rows(rows: int) -> bool:
    """Whether a product with this many rows takes the skinny path (measured, see above)."""
    return 0 < rows <= 11 or (0 < rows <= MAX_ROWS and rows % 8 == 0)


def skinny_forward(self, x):
    """nn.Linear.forward, computed as W @ x.T for few rows (see the module docstring). Runs once per
    linear layer per forward (211 times a step for the 135M model): kept to a few tensor calls."""
    n = x.shape[-1]
    rows = x.numel() // n if n else 0  # 0: an empty input, F.linear
    w, bias = self.weight, self.bias
    if not skinny_rows(rows) or _grad_enabled() or x.dtype != w.dtype:
        return _linear(x, w, bias)
    x2 = x.reshape(rows, n)
    if rows == 1:
        y = _mm(w, _cat((x2, x2)).t())[:, 0]
    else:
        y = _mm(w, (x2 if x2.is_contiguous() else x2.contiguous()).t()).t()
    if bias is not None:
        y = y + bias
    return y.contiguous().view(x.shape[:-1] + (w.shape[0],))


def onednn_ok() -> bool:
    """Whether this torch can run oneDNN's packed linear (a CPU build with mkldnn)."""
    return bool(torch.backends.mkldnn.is_available()) and _pointwise is not None


def pack(lin) -> None:
    """Reorder ``lin``'s weight for oneDNN (kept beside it, with the weight's version)."""
    w = lin.weight.detach()
    lin._onednn = (_reorder(w, PACK_ROWS), lin.weight._version)


def onednn_forward(self, x):
    """nn.Linear.forward for the "onednn" kernel: one or two rows as ``skinny_forward``, more
    through oneDNN's packed product (float32, no gradient; else as ``skinny_forward``)."""
    n = x.shape[-1]
    rows = x.numel() // n if n else 0
    w = self.weight
    if rows <= 2 or _grad_enabled() or x.dtype != torch.float32 or w.dtype != torch.float32:
        return skinny_forward(self, x)
    if torch.compiler.is_compiling():  # decoding.compiled: packs were refreshed before the run
        return torch.ops.decoding.onednn_linear(x.reshape(rows, n), self._onednn[0], self.bias,
                                                w.shape[0]).view(x.shape[:-1] + (w.shape[0],))
    if self._onednn[1] != w._version:  # the weight changed in place (e.g. trained): pack it again
        pack(self)
    y = _pointwise(x.reshape(rows, n), self._onednn[0], self.bias, "none", [], "")
    return y.view(x.shape[:-1] + (w.shape[0],))


_few: list = []  # the few-row kernel's ops (decoding.fewrows.ops()), once a model uses them


def pack_fewrows(lin) -> None:
    """Pack ``lin``'s weight into the few-row kernel's panels (kept beside it, with its version)."""
    w = lin.weight.detach()
    lin._fewrows = (_few[0].pack(w), lin.weight._version)


def fewrows_forward(self, x):
    """nn.Linear.forward for the "fewrows" kernel: 1 to ``fewrows.MAX_ROWS`` rows through the
    few-row kernel (decoding/fewrows.py: each weight streamed once for all rows, row invariant), and
    more rows up to this machine's ``row_limit`` in passes of ``MAX_ROWS``; anything else (a longer
    prefill, gradients, another dtype) as ``F.linear``."""
    n = x.shape[-1]
    rows = x.numel() // n if n else 0
    w = self.weight
    limit = getattr(self, "_few_limit", FEW_ROWS)
    if not 0 < rows <= limit or _grad_enabled() or x.dtype != torch.float32 or w.dtype != torch.float32:
        return _linear(x, w, self.bias)
    if not torch.compiler.is_compiling() and self._fewrows[1] != w._version:  # changed in place: pack again
        pack_fewrows(self)
    plan = getattr(self, "_row_plan", ())
    sweep = plan[rows] if rows < len(plan) else rows
    y = _few[0].linear(x.reshape(rows, n), self._fewrows[0], self.bias, w.shape[0], sweep)
    return y.view(x.shape[:-1] + (w.shape[0],))


PLAN_ROWS = 12  # row counts whose sweep ``row_plan`` measures (up to two AVX2 sweeps of 6)
PLAN_GAIN = 1.05  # a row count is computed as more rows where that measures this much faster


def row_plan(model, repeats: int = 5, progress=None) -> list[int]:
    """For each row count r up to ``PLAN_ROWS``, the rows the few-row kernel computes for it: the
    count r' >= r whose products measure fastest, if by ``PLAN_GAIN`` (some CPUs sweep 4 rows faster
    than 2 or 3: a 2-core AMD EPYC with AVX2, all products of the bundled model 25.4 / 26.0 ms at 2 / 3
    rows against 21.5 at 4; an Intel Xeon with AVX-512 does not); else r. Measured on the model's
    largest weight and its widest-input one; kept per machine like the kernel choice (``choice_file``)."""
    key = machine_key(model) + " | row plan"
    kept = _read_choices().get(key)
    if kept and len(kept.get("plan", ())) == PLAN_ROWS + 1:
        return list(kept["plan"])
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and hasattr(m, "_fewrows")]
    if not linears or not fewrows_ok(progress):
        return list(range(PLAN_ROWS + 1))
    probes = {id(m): m for m in (max(linears, key=lambda m: m.weight.numel()), max(linears, key=lambda m: m.in_features))}
    xs = [[torch.randn(r, m.in_features) for r in range(PLAN_ROWS + 1)] for m in probes.values()]
    with torch.inference_mode():
        t = [0.0] + [sum(_median_seconds(lambda m=m, x=x[r]: _few[0].linear(x, m._fewrows[0], m.bias, m.out_features), repeats)
                         for m, x in zip(probes.values(), xs)) for r in range(1, PLAN_ROWS + 1)]
    plan = plan_from_times(t)
    if _quiet():
        _keep_choice(key, {"plan": plan, "seconds": [round(v, 6) for v in t], "measured": time.strftime("%Y-%m-%d %H:%M")})
    return plan


def plan_from_times(t: list[float], gain: float = PLAN_GAIN) -> list[int]:
    """``row_plan``'s rule: t[r] the seconds at r rows (t[0] unused) -> r's rows computed."""
    plan = list(range(len(t)))
    for r in range(1, len(t)):
        best = min(range(r, len(t)), key=lambda q: t[q])
        if t[best] * gain <= t[r]:
            plan[r] = best
    return plan


LIMIT_PASSES = (2, 4, 8, 16, 32)  # row counts (x fewrows.MAX_ROWS) at which ``row_limit`` races the kernel against F.linear


def row_limit(model, repeats: int = 3, progress=None) -> int:
    """The most rows this machine's few-row kernel takes, in passes of ``MAX_ROWS`` (each pass streams
    the weights again), before ``F.linear`` (MKL's GEMM) is faster: the largest of ``LIMIT_PASSES`` x
    MAX_ROWS up to which the kernel measured faster at every probe, or MAX_ROWS. On a 2-core AMD EPYC
    with AVX-512 (Zen 5) the kernel beat MKL's product 2-3x from 16 rows to 256 (all 211 products of
    the bundled model at 64 rows: 55 against 132 ms), where this limit was 32 rows and a 48-token step
    cost 5.6 one-token steps; where MKL's GEMM is the faster one, F.linear keeps those rows. Measured
    on the model's most common weight shape and its widest-input one (not the logits head: a prefill
    keeps one row of it); kept per machine like the row plan."""
    key = machine_key(model) + " | row limit"
    kept = _read_choices().get(key)
    if kept and isinstance(kept.get("limit"), int):
        return kept["limit"]
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and hasattr(m, "_fewrows")]
    if not linears or not fewrows_ok(progress):
        return FEW_ROWS
    shapes = [tuple(m.weight.shape) for m in linears]
    common = max(linears, key=lambda m: shapes.count(tuple(m.weight.shape)))
    probes = {id(m): m for m in (common, max(linears, key=lambda m: m.in_features))}.values()
    rows = [p * FEW_ROWS for p in LIMIT_PASSES]
    few, lib = [], []
    with torch.inference_mode():
        for r in rows:
            xs = [torch.randn(r, m.in_features) for m in probes]
            few.append(sum(_median_seconds(lambda m=m, x=x: _few[0].linear(x, m._fewrows[0], m.bias, m.out_features), repeats)
                           for m, x in zip(probes, xs)))
            lib.append(sum(_median_seconds(lambda m=m, x=x: F.linear(x, m.weight, m.bias), repeats) for m, x in zip(probes, xs)))
    limit = limit_from_times(rows, few, lib)
    if _quiet():
        _keep_choice(key, {"limit": limit, "rows": rows, "fewrows": [round(v, 6) for v in few],
                           "linear": [round(v, 6) for v in lib], "measured": time.strftime("%Y-%m-%d %H:%M")})
    return limit


def limit_from_times(rows: list[int], few: list[float], lib: list[float], floor: int = FEW_ROWS) -> int:
    """``row_limit``'s rule: the largest of ``rows`` (ascending) up to which the kernel's seconds ``few``
    were under ``F.linear``'s ``lib`` at every probe; ``floor`` where it lost at the first."""
    limit = floor
    for r, a, b in zip(rows, few, lib):
        if a >= b:
            break
        limit = r
    return limit


def fewrows_ok(progress=None) -> bool:
    """Whether the few-row kernel runs here (built or loaded now on first call; decoding.fewrows)."""
    from . import fewrows

    ops = fewrows.ops(progress)
    if ops is not None and not _few:
        _few.append(ops)
    return ops is not None


def onednn_gain(model, repeats: int = 5) -> float:
    """Seconds of the skinny product / seconds of oneDNN's packed one, ``ONEDNN_PROBE_ROWS`` rows,
    on the model's largest weight (0 where oneDNN cannot run)."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if not linears or not onednn_ok():
        return 0.0
    big = max(linears, key=lambda m: m.weight.numel())
    if big.weight.dtype != torch.float32:
        return 0.0
    probe = torch.nn.Linear(big.in_features, big.out_features, bias=False)
    probe.weight = big.weight
    try:
        pack(probe)
    except RuntimeError:
        return 0.0
    x = torch.randn(1, ONEDNN_PROBE_ROWS, big.in_features, dtype=big.weight.dtype)
    with torch.inference_mode():
        skinny = _median_seconds(lambda: skinny_forward(probe, x), repeats)
        onednn = _median_seconds(lambda: onednn_forward(probe, x), repeats)
    return skinny / onednn if onednn > 0 else 0.0


FEW_GAIN = 1.1  # "auto" takes the few-row kernel where its 1- and 8-row products measure this much faster


def fewrows_gain(model, kernel: str, repeats: int = 5, progress=None) -> float:
    """Seconds of ``kernel``'s products / the few-row kernel's, one row plus ``ONEDNN_PROBE_ROWS``
    rows (an AR step and a parallel step), on the model's largest weight (0 where the few-row
    kernel cannot run here)."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        return 0.0
    big = max(linears, key=lambda m: m.weight.numel())
    if big.weight.dtype != torch.float32 or big.weight.device.type != "cpu" or not fewrows_ok(progress):
        return 0.0
    base, few = (torch.nn.Linear(big.in_features, big.out_features, bias=False) for _ in range(2))
    base.weight = few.weight = big.weight
    pack_fewrows(few)
    forward = {"skinny": skinny_forward, "onednn": onednn_forward}.get(kernel)
    if forward is onednn_forward:
        pack(base)
    elif forward is None:
        forward = lambda m, x: _linear(x, m.weight)  # noqa: E731
    xs = [torch.randn(1, rows, big.in_features) for rows in (1, ONEDNN_PROBE_ROWS)]
    with torch.inference_mode():
        t_base = sum(_median_seconds(lambda x=x: forward(base, x), repeats) for x in xs)
        t_few = sum(_median_seconds(lambda x=x: fewrows_forward(few, x), repeats) for x in xs)
    return t_base / t_few if t_few > 0 else 0.0


def weight_read_seconds(model, repeats: int = 20) -> float:
    """Median time to read every parameter once (a sum over each): the bandwidth floor of a step."""
    params = [p.detach() for p in model.parameters()]
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for p in params:
            p.sum()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def _median_seconds(fn, repeats: int) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[len(ts) // 2]


def skinny_gain(model, repeats: int = 5) -> float:
    """Seconds of F.linear / seconds of the skinny product, one row, on the model's largest weight."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        return 0.0
    big = max(linears, key=lambda m: m.weight.numel())
    x = torch.randn(1, 1, big.in_features, dtype=big.weight.dtype, device=big.weight.device)
    with torch.inference_mode():
        stock = _median_seconds(lambda: F.linear(x, big.weight), repeats)
        skinny = _median_seconds(lambda: skinny_forward(big, x), repeats)
    return stock / skinny if skinny > 0 else 0.0


GAIN = 1.2  # "auto" takes the skinny kernel where it measures at least this much faster


def choice_file() -> Path:
    """Where ``use_skinny`` keeps its measured choices (the cache folder of ``decoding.model``)."""
    from .paths import cache_dir

    return cache_dir() / "kernel-choice.json"


def machine_key(model) -> str:
    """What a kernel choice depends on: the CPU, its threads, torch, the dtype and the largest weight's shape."""
    cpu = cpu_name()
    big = max((m for m in model.modules() if isinstance(m, torch.nn.Linear)), key=lambda m: m.weight.numel())
    return (f"{cpu} | {torch.get_num_threads()} threads | torch {torch.__version__} | {big.weight.dtype} "
            f"{tuple(big.weight.shape)} | {','.join(KERNELS[1:])}")  # a new kernel: choices made without it measured again


def _read_choices() -> dict:
    try:
        return json.loads(choice_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _keep_choice(key: str, row: dict) -> None:
    p = choice_file()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        choices = _read_choices()
        choices[key] = row
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(choices, indent=1), encoding="utf-8")
        os.replace(tmp, p)
    except OSError:
        pass  # a read-only cache: measure again next time


def _quiet() -> bool:
    """Whether the machine looks idle enough for a measurement to stand (1-min load under half its cores)."""
    try:
        return os.getloadavg()[0] < 0.5 * (os.cpu_count() or 1)
    except OSError:
        return False


def room_for_packing(model) -> bool:
    """Whether a second copy of the linear layers' weights (oneDNN's packed ones) takes at most a
    quarter of the memory available now (True where that cannot be read)."""
    need = sum(m.weight.numel() * m.weight.element_size() for m in model.modules() if isinstance(m, torch.nn.Linear))
    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return True
    return need <= avail / 4


def auto_choice(model, progress=None) -> tuple[str, dict]:
    """The kernel "auto" picks on this machine and why: a choice other than stock kept from an
    earlier measurement stands; otherwise measure now (``skinny_gain`` at one row; where the skinny
    product wins, ``onednn_gain`` at ``ONEDNN_PROBE_ROWS`` rows, if the packed copy fits in memory;
    then ``fewrows_gain`` against that choice, if its packed copy fits) and keep the result when it
    is not stock, or when the machine was quiet (a stock result measured under load is not kept:
    the next start measures again)."""
    key = machine_key(model)
    kept = _read_choices().get(key)
    if kept and kept.get("kernel") in KERNELS[1:-1]:
        return kept["kernel"], {**kept, "from": "kept"}
    gain = skinny_gain(model)
    kernel = "skinny" if gain >= GAIN else "stock"
    row = {"kernel": kernel, "gain": round(gain, 3)}
    room = room_for_packing(model)
    if kernel == "skinny":
        og = onednn_gain(model) if room else 0.0
        row["onednn_gain"] = round(og, 3)
        if og >= GAIN:
            row["kernel"] = "onednn"
    fg = fewrows_gain(model, row["kernel"], progress=progress) if room else 0.0
    row["fewrows_gain"] = round(fg, 3)
    if fg >= FEW_GAIN:
        row["kernel"] = "fewrows"
    row.update(quiet=_quiet(), measured=time.strftime("%Y-%m-%d %H:%M"))
    if row["kernel"] != "stock" or row["quiet"]:
        _keep_choice(key, row)
    return row["kernel"], {**row, "from": "measured"}


def use_skinny(model, kernel: str = "auto", progress=None) -> str:
    """Make the model's linear layers use the skinny product ("skinny"), oneDNN's packed one past
    two rows ("onednn": each float32 weight packed now), the few-row kernel for decoding steps
    ("fewrows": each float32 weight packed into its panels now; built on first use, ``progress``
    says so), or leave them ("stock"); "auto": what ``auto_choice`` measures on this CPU (kept per
    machine). "onednn" where oneDNN cannot pack (no mkldnn, another device) is the skinny kernel;
    "fewrows" where its kernel cannot be built is the stock one. Returns the kernel in use."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; use one of {', '.join(KERNELS)}")
    if kernel == "stock":
        return "stock"
    params = list(model.parameters())
    on_cpu = bool(params) and all(p.device.type == "cpu" for p in params)
    if kernel == "auto":
        if not on_cpu or getattr(model, "hf_device_map", None):
            return "stock"
        kernel = auto_choice(model, progress)[0]
        if kernel == "stock":
            return "stock"
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if kernel == "fewrows":
        return _use_fewrows(model, linears, on_cpu, progress)
    if kernel == "onednn" and on_cpu and onednn_ok():
        try:
            for m in linears:
                if m.weight.dtype == torch.float32:
                    pack(m)
        except RuntimeError:
            kernel = "skinny"
    else:
        kernel = "skinny"
    for m in linears:
        use_onednn = kernel == "onednn" and hasattr(m, "_onednn")
        m.forward = types.MethodType(onednn_forward if use_onednn else skinny_forward, m)
    return kernel


def _use_fewrows(model, linears: list, on_cpu: bool, progress=None) -> str:
    """The "fewrows" kernel on these layers of ``model``, with this machine's ``row_plan``:
    "fewrows", or "stock" where it cannot run."""
    if not on_cpu or not fewrows_ok(progress):
        return "stock"
    try:
        packed = [m for m in linears if m.weight.dtype == torch.float32]
        for m in packed:
            pack_fewrows(m)
    except RuntimeError:
        return "stock"
    plan, limit = row_plan(model, progress=progress), row_limit(model, progress=progress)
    for m in packed:
        m.forward = types.MethodType(fewrows_forward, m)
        m._row_plan, m._few_limit = plan, limit
    return "fewrows"
