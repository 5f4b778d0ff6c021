"""The Benchmarks page (issue 11, item 6): the shipped Spec-Bench asset, its figures, the
category sentences and the papers' figures, marked as theirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from viz import bench
from viz.style import method_name

ROOT = Path(__file__).resolve().parent.parent
ASSET = ROOT / "assets" / "bench_spec_bench_cpu.json"


@pytest.fixture(scope="module")
def asset():
    return json.loads(ASSET.read_text(encoding="utf-8"))


def test_the_asset_says_where_it_comes_from(asset):
    for k in ("model", "date", "machine", "command", "prompts", "settings"):
        assert asset["source"].get(k)
    cats = bench.categories(asset)
    assert len(cats) == 14 and cats[-1] == "ALL"
    by = {(r["method"], r["category"]): r for r in asset["rows"]}
    assert by[("ar", "ALL")]["prompts"] == 52 and by[("ar", "coding")]["tokens_per_step"] == 1.0
    # the figures docs/benchmarks.md quotes ("Cost-aware step budgets and Token Recycling")
    assert by[("lookahead", "ALL")]["tokens_per_step"] == pytest.approx(1.87, abs=0.005)
    assert by[("pld", "extraction")]["tokens_per_step"] == pytest.approx(3.36, abs=0.005)
    assert by[("pld:auto", "ALL")]["vs_ar"] == pytest.approx(1.194, abs=0.0005)
    assert all(by[(m, "ALL")]["exact"] for m in bench.SHOWN if (m, "ALL") in by)  # compared with its AR twin: equal


def test_figures_draw_the_asset(asset):
    by = {(r["method"], r["category"]): r for r in asset["rows"]}
    cats = bench.categories(asset)
    fig = bench.tokens_per_step_figure(asset)
    shown = [m for m in bench.SHOWN if (m, "ALL") in by]  # the asset's methods, in SHOWN's order
    assert [t.name for t in fig.data] == [method_name(m) for m in shown]
    assert fig.data[2].name == "Lookahead (budget auto)" and fig.data[2].marker.pattern.shape == "/"
    for t, m in zip(fig.data, shown):
        assert list(t.x) == cats and list(t.y) == [by[(m, c)]["tokens_per_step"] for c in cats]
    sp = bench.speedup_figure(asset)
    la = next(t for t in sp.data if t.name == "Lookahead")
    assert list(la.y) == [by[("lookahead", c)]["vs_ar"] for c in cats]
    notes = [a.text for a in sp.layout.annotations]
    assert any("lookahead paper: 1.8×" in n for n in notes) and any("CLLM paper: 2.4–3.4×" in n for n in notes)
    assert any("not measured here" in (t.name or "") for t in sp.data)


def test_table_and_sentences(asset):
    rows = bench.table_rows(asset)
    ext = next(r for r in rows if r["category"] == "extraction")
    assert ext["Prompt lookup tokens/step"] == pytest.approx(3.36, abs=0.005)
    assert ext["Lookahead tokens/step"] == pytest.approx(2.63, abs=0.005)
    assert ext["Jacobi prompts"] == 1  # Jacobi ran on one prompt per category: said so
    words = bench.category_sentence(asset, "extraction")
    assert words.startswith("extraction: Prompt lookup commits the most per step (3.36 tokens)")
    assert "copies long spans" in words and "fastest is Prompt lookup (budget auto) at 1.66× AR" in words
    words = bench.category_sentence(asset, "writing")
    assert words.startswith("writing: Token Recycling commits the most per step (1.76 tokens)")
    assert "fastest is Token Recycling (budget auto) at 1.05× AR" in words
    slow = {"source": {}, "rows": [{"method": "pld", "category": "x", "tokens_per_step": 1.5, "vs_ar": 0.8}]}
    assert "none beats AR" in bench.category_sentence(slow, "x")
    assert [r["published speedup"] for r in bench.published_rows()] == ["1.8× (MT-Bench)", "2.3× (HumanEval)",
                                                                       "2.4–3.4× (Jacobi on a CLLM)"]


def test_bench_asset_script_writes_the_summary_with_its_source(tmp_path):
    import sys
    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_asset

    def row(method, pid, steps, n_out, secs):
        return {"method": method, "record": True, "category": "coding", "id": pid, "steps": steps,
                "output_ids": list(range(n_out)), "seconds": secs, "tokens_per_s": n_out / secs}
    rows = [row("ar", 1, 9, 10, 1.0), row("lookahead", 1, 3, 10, 0.5)]
    out = bench_asset.asset(rows, date="d", machine="m", command="c")
    assert out["source"] == {"date": "d", "machine": "m", "command": "c"}
    by = {(r["method"], r["category"]): r for r in out["rows"]}
    assert by[("lookahead", "coding")]["tokens_per_step"] == 3.0 and by[("lookahead", "ALL")]["vs_ar"] == 2.0


def test_empty_asset_explains_itself():
    assert bench.tokens_per_step_figure(None).layout.annotations[0].text == "No benchmark asset."


def test_page_renders():
    st_testing = pytest.importorskip("streamlit.testing.v1")
    at = st_testing.AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("app_pages/benchmarks.py").run()
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) == 6  # the two tables' figures, the drafters' two, the scaling law's two
    assert any("edit workload" in s.value for s in at.subheader)
    assert any("not measured here" in s.value for s in at.subheader)
    assert any("2026-11-30" in c.value and "skinny" in c.value for c in at.caption)
    assert any("1194.9 s" in c.value and "scaling_grid.py" in c.value for c in at.caption)


def test_drafters_asset_holds_both_workloads():
    d = json.loads((ROOT / "assets" / "bench_drafters_cpu.json").read_text(encoding="utf-8"))
    cats = {r["category"] for r in d["rows"]}
    assert {"edit_code", "edit_doc", "extraction", "ALL"} <= cats
    methods = {r["method"] for r in d["rows"]}
    assert {"suffix", "suffix:auto", "pld", "tr", "lookahead"} <= methods
    assert all(r["exact"] in (True, None) for r in d["rows"])
    from decoding.methods import REGISTRY
    sfx = REGISTRY["suffix"].defaults  # it says which suffix settings it measured: today's defaults
    assert all(f"{k} {sfx[k]}" in d["source"]["settings"] for k in ("alpha", "max_spec", "offset", "min_match"))
    fig = bench.tokens_per_step_figure(d)
    assert {"Suffix drafting", "Suffix drafting (budget auto)", "Jacobi (budget auto)"} <= {t.name for t in fig.data}
