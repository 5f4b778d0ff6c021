"""Figure builders: pure functions from a decoding Trace to Plotly figures (no Streamlit, no torch).

- ``viz.jacobi``: a block's trajectory animated, CLLM's static block figure, per-block counts;
- ``viz.lookahead``: the step animation, the pool table and graph, the attention mask heatmap;
- ``viz.compare``: tokens per step, committed-vs-step curves, provenance of each output token;
- ``viz.sampling``: the accept / reject / draw decisions of a sampled run, step by step;
- ``viz.style``: the colour-blind-safe palette, token labels, escaping, animation controls.
"""
