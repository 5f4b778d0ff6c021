"""The linear layers' products of one decoding step, by kernel and row count (issue 21): every
``nn.Linear`` of the bundled model (211 products: 30 layers x 7, and the logits head) multiplied by
``rows`` token vectors, as ``F.linear`` (stock), ``W @ x.T`` (skinny), oneDNN's packed product
(the onednn kernel past two rows) and the few-row kernel (decoding/fewrows.py, where it builds);
the median of ``--repeats`` passes, beside the time to read the weights once. No attention, cache or Python of a step: what decoding/kernels.py chooses between.

    python scripts/kernel_products.py [--rows 1,2,3,4,8,16,32,64,128,256] [--repeats 7]

Run it on an idle machine (it prints the load average); compare within one run only.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F

from decoding.kernels import (_median_seconds, fewrows_forward, fewrows_ok, onednn_forward, onednn_ok, pack, pack_fewrows,
                              skinny_forward, weight_read_seconds)
from decoding.model import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,2,3,4,8,16,32,64,128,256")
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    rows_list = [int(r) for r in a.rows.split(",")]
    if not rows_list or min(rows_list) < 1 or a.repeats < 1:
        raise SystemExit("--rows takes positive counts, --repeats a positive number")
    lm = load_model(None, kernel="stock")
    linears = [m for m in lm.model.modules() if isinstance(m, torch.nn.Linear)]
    kernels = {"stock": lambda m, x: F.linear(x, m.weight, m.bias), "skinny": skinny_forward}
    if onednn_ok():
        for m in linears:
            pack(m)
        kernels["onednn"] = onednn_forward
    if fewrows_ok(print):
        for m in linears:
            pack_fewrows(m)
        kernels["fewrows"] = fewrows_forward
    else:
        from decoding.fewrows import why
        print(f"the few-row kernel cannot run here: {why()}")
    print(f"{len(linears)} linear layers, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"load average {os.getloadavg()[0]:.2f}; reading the weights once: "
          f"{weight_read_seconds(lm.model) * 1e3:.1f} ms")
    print("rows  " + "".join(f"{k:>10}" for k in kernels) + "   (ms for all the products of one step)")
    with torch.inference_mode():
        for rows in rows_list:
            xs = [torch.randn(1, rows, m.in_features) for m in linears]
            got = {k: 1e3 * _median_seconds(lambda: [fn(m, x) for m, x in zip(linears, xs)], a.repeats)
                   for k, fn in kernels.items()}
            print(f"{rows:>4}  " + "".join(f"{v:>10.1f}" for v in got.values()), flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
