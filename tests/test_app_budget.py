"""AppTest: the sidebar runs a budget=auto lookahead, and the Lookahead and Explain pages show its
decisions (the budget view renders, with the run's own numbers)."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")

from test_app_sampling import sidebar_run  # noqa: E402


def test_sidebar_runs_a_budgeted_lookahead_and_the_pages_show_its_decisions(monkeypatch):
    from app_pages.common import session
    from decoding.budget import StepCosts
    from tiny import tiny_lm
    from viz import budget

    import decoding.loop as loop

    # a flat (GPU-like) curve trusted from the first step, so that the short run feeds guesses
    monkeypatch.setattr(loop, "step_costs_for", lambda lm: StepCosts(lambda k: 1.0 + 0.001 * k, calibrate_first=False))
    original = session.init_state

    def init_auto():  # the sidebar's Step budget set to auto on the first run, before the widgets exist
        import streamlit as st

        first = "p_budget" not in st.session_state
        original()
        if first:
            st.session_state.p_budget = "auto"

    monkeypatch.setattr(session, "init_state", init_auto)
    at = sidebar_run(monkeypatch, tiny_lm("llama", 0), "Lookahead", 32)
    t = at.session_state["results"].traces["lookahead"]
    assert t.params["budget"] == "auto" and all(s.budget is not None for s in t.steps)
    at.switch_page("app_pages/lookahead.py").run()
    assert not at.exception
    assert any(budget.sentence(t) == m.value for m in at.markdown)
    figs = [c for c in at.get("plotly_chart") if "Budget auto" in c.proto.spec]
    assert figs, "the budget view is drawn"
    at.switch_page("app_pages/explain.py").run()
    assert not at.exception
    assert any("The step budget" in h.value for h in at.subheader)
