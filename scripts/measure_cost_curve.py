"""Measure the step-cost curve of the bundled model on this machine and ship it in assets/.

    python scripts/measure_cost_curve.py [--out FILE] [--context 256] [--repeats 5] [--kernel auto] [--step eager]

``--out`` defaults to the shipped file of the curve's device and kernel,
assets/cost_curve_<device>-<kernel>[-compiled].json (the skinny kernel's is cost_curve_cpu.json).

The Explain page opens on this file when the live curve of the model/device is not cached yet,
so it works without measuring. The curve is also written to the cache folder (decoding.perf.costs).
"""

from __future__ import annotations

import argparse

from decoding.perf.costs import DEFAULT_CONTEXT, curve_path
from decoding.perf.measure import measure_curve
from decoding.kernels import KERNELS
from decoding.model import load_model


def shipped_name(device: str, kernel: str) -> str:
    """The assets/ file a curve of this device and kernel label ("fewrows+compiled") ships in.

    >>> shipped_name("cpu", "fewrows+compiled"), shipped_name("cpu", "skinny")
    ('assets/cost_curve_cpu-fewrows-compiled.json', 'assets/cost_curve_cpu.json')
    """
    kind = device.split(":")[0]
    return f"assets/cost_curve_{kind}.json" if kernel == "skinny" else f"assets/cost_curve_{kind}-{kernel.replace('+', '-')}.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="", help="default: assets/cost_curve_<device>-<kernel>[-compiled].json")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--context", type=int, default=DEFAULT_CONTEXT)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--kernel", default="auto", choices=list(KERNELS), help="the linear layers' product (decoding/kernels.py)")
    ap.add_argument("--step", default="eager", choices=["eager", "compiled"],
                    help="the decode step (decoding/compiled.py; compiled: each fed size up to 64 compiles first)")
    a = ap.parse_args()
    lm = load_model(None, device=a.device, progress=print, kernel=a.kernel, step=a.step)
    c = measure_curve(lm, context=a.context, repeats=a.repeats,
                      progress=lambda f, m: print(f"[{f:4.0%}] {m}", flush=True))
    out = a.out or shipped_name(c.device, c.kernel)
    c.save(out)
    c.save(curve_path(c.model_id, c.device, c.dtype, c.threads, c.kernel))
    print(f"{c.model_id} on {c.regime}; AR overhead {c.ar_overhead}")
    for k, s, r in zip(c.ks, c.seconds, c.relative()):
        print(f"k={k:>4}  {s * 1000:8.1f} ms  {r:5.2f}x")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
