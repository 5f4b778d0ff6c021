"""The sampling decisions view on a hand-made sampled lookahead trace (worked out below).

Lookahead, W = 2, N = 3, G = 2, temperature 0.8, prefill token 10:
    step 0: no candidates: 11 drawn from p (0.4)
    step 1: candidates (12 13) and (12 40) for 11: 12 accepted (0.5), 13 accepted (0.3),
            then 14 drawn after the full match (0.6)                      -> commits 12 13 14
    step 2: candidate (15 16) for 14: 15 rejected (0.25), 17 drawn from what was left (0.5)
            -> commits 17
"""

from __future__ import annotations

import json

from decoding import analysis
from decoding.methods.lookahead import LookaheadRecord
from decoding.trace import SampleRecord, Step, Trace
from tests.viz_traces import lookahead_trace
from viz import sampling
from viz.style import BLUE, GREEN, ORANGE, VERMILLION


def sampled_trace() -> Trace:
    t = Trace(method="lookahead", params={"W": 2, "N": 3, "G": 2, "seed_pool_prompt": True, "harvest_output": False,
                                          "seed": 0, "budget": "fixed", "temperature": 0.8, "top_k": 0, "top_p": 0.9, "sample_seed": 0},
              model_id="hand-made", device="cpu", dtype="float32", prompt_ids=[1, 2, 3],
              prompt_pieces=["A", " B", " <C>"], prompt_text="A B <C>", prefill_seconds=0.01)
    t.output_ids = [10, 11, 12, 13, 14, 17]
    t.output_pieces = [" x", " y", " <z>", " w", "!", " &"]
    t.vocab = {"15": "<bad>"}
    la = dict(window=[[1, 2]], harvested=[], origins=[], pool_ops=[])
    t.steps = [
        Step(0, 3, [11], 0.01, 0.008, record=LookaheadRecord(candidates=[], matched=[], chosen=-1, **la),
             sampling=SampleRecord([[]], [11], [0.4]), origins=["step"]),
        Step(1, 7, [12, 13, 14], 0.01, 0.008,
             record=LookaheadRecord(window=[[1, 2], [20, 21]], harvested=[], candidates=[[12, 13], [12, 40]],
                                       matched=[2, 1], origins=["window", "prompt"], chosen=0, pool_ops=[]),
             sampling=SampleRecord([[[0, 12, 0.5, True]], [[0, 13, 0.3, True]], []], [12, 13, 14], [0.5, 0.3, 0.6]),
             origins=["pool", "pool", "step"]),
        Step(2, 7, [17], 0.01, 0.008,
             record=LookaheadRecord(window=[[1, 2], [20, 21]], harvested=[], candidates=[[15, 16]], matched=[0],
                                       origins=["window"], chosen=-1, pool_ops=[]),
             sampling=SampleRecord([[[0, 15, 0.25, False]]], [17], [0.5]), origins=["step"]),
    ]
    t.seconds, t.stop_reason, t.max_new_tokens = 0.03, "max_new_tokens", 6
    return t


def test_decision_cells_follow_the_record():
    cells = sampling.decision_cells(sampled_trace())
    got = [(c["x"], c["y"], c["token"], c["outcome"], c["p"]) for c in cells]
    assert got == [
        (0, 0, 11, "drawn", 0.4),
        (1, 0, 12, "accepted", 0.5), (1, 1, 13, "accepted", 0.3), (1, 2, 14, "drawn", 0.6),
        (2, 0, 15, "rejected", 0.25), (2, 1, 17, "residual", 0.5),
    ]
    assert [c["position"] for c in cells] == [0, 0, 1, 2, 0, 0]


def test_decisions_figure_colours_text_and_hover_are_escaped():
    t = sampled_trace()
    fig = sampling.decisions_figure(t)
    d = fig.data[0]
    assert list(d.marker.color) == [BLUE, GREEN, GREEN, BLUE, VERMILLION, ORANGE]
    assert list(d.x) == [0, 1, 1, 1, 2, 2] and list(d.y) == [0, 0, 1, 2, 0, 1]
    assert d.text[1] == "␣&lt;z&gt;" and d.text[4] == "&lt;bad&gt;"  # model text is escaped
    assert "p = 0.250" in d.hovertext[4] and "rejected" in d.hovertext[4] and "<bad>" not in d.hovertext[4]
    assert "candidate 1" not in d.hovertext[2] and "candidate 0" in d.hovertext[2]
    assert {tr.name for tr in fig.data if tr.showlegend} == {label for _, label in sampling.OUTCOMES.values()}
    assert "2 of 3 candidate tokens accepted" in fig.layout.title.text and "top_p=0.9" in fig.layout.title.text
    json.loads(fig.to_json())  # serialisable for st.plotly_chart


def test_analysis_of_the_hand_made_trace():
    t = sampled_trace()
    assert analysis.sampling_stats(t) == {"tries": 3, "accepted": 2, "accept_rate": 2 / 3, "mean_p_accepted": 0.4,
                                          "mean_p_rejected": 0.25, "draws": 3}
    # accepted candidate tokens first, the drawn token last
    assert analysis.provenance(t) == ["prefill", "step", "pool", "pool", "step", "step"]
    assert Trace.from_json(t.to_json()) == t


def test_greedy_trace_gets_a_message_not_a_chart():
    fig = sampling.decisions_figure(lookahead_trace())
    assert not fig.data and "greedily" in fig.layout.annotations[0].text
