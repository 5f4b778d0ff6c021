"""Parallel Decoding Lab's decoding core: exact AR / Jacobi / lookahead / prompt-lookup decoding
that records every step as a Trace. No Streamlit, no Plotly here."""

from .run import DEFAULT_PARAMS, MAX_NEW_TOKENS_CAP, ConfigError, Run, decode
from .trace import SCHEMA_VERSION, Trace, TraceError

__all__ = ["DEFAULT_PARAMS", "MAX_NEW_TOKENS_CAP", "ConfigError", "Run", "decode", "SCHEMA_VERSION", "Trace", "TraceError"]
