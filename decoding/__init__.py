"""Parallel Decoding Lab's decoding core: exact AR / Jacobi / lookahead / prompt-lookup decoding
that records every step as a Trace. No Streamlit, no Plotly here.

    decoding/loop.py       Run, decode: the five-step loop (propose, forward, verify, commit, record)
    decoding/methods/      the method registry and one file per method
    decoding/verify.py     the step context, the proposal/verdict contract and the shared verifiers
    decoding/draft.py      draft trees and how they are fed (tree attention)
    decoding/budget.py     the cost-aware step budget (budget="auto"), written once for every method
    decoding/sampling.py   the sampling distribution (transformers' warpers, seeded draws)
    decoding/trace.py      the Trace and its versioned JSON
    decoding/analysis.py   analyses of a trace (no torch)
    decoding/perf/         the performance model: step-cost curve, speedup account, tuning
    decoding/bench.py      the bench library (runs, rows, tables; transformers' generate as a baseline)
    decoding/io.py, cli.py the command line (python -m decoding generate / bench / merge / tune; pdl-decode)

Importing ``decoding`` (or decoding.trace, decoding.analysis, decoding.methods) does not import
torch; ``Run`` and ``decode`` load the loop on first use.
"""

from .methods import METHODS, REGISTRY, ConfigError, resolve_params
from .trace import SCHEMA_VERSION, Trace, TraceError

__all__ = ["METHODS", "REGISTRY", "MAX_NEW_TOKENS_CAP", "ConfigError", "Run", "decode", "resolve_params",
           "SCHEMA_VERSION", "Trace", "TraceError"]


def __getattr__(name: str):
    if name in ("Run", "decode", "MAX_NEW_TOKENS_CAP"):
        from . import loop

        return getattr(loop, name)
    raise AttributeError(f"module 'decoding' has no attribute {name!r}")
