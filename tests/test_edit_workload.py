"""The edit workload of issue 22 (benchmarks/edits): the shipped prompts are the generator's for the
default seed, and each turn carries the previous turn's document with that turn's edit made."""

import difflib
import re
from collections import defaultdict
from pathlib import Path

import pytest

from benchmarks.edits import generate
from benchmarks.edits.generate import Edit, apply
from decoding.io import jsonl, read_prompts

SHIPPED = Path(__file__).resolve().parents[1] / "benchmarks" / "edits" / "question.jsonl"


def shipped() -> list[dict]:
    return [d for _, d in jsonl(str(SHIPPED))]


def document(prompt: str) -> str:
    """The text of the prompt's one fenced block."""
    (doc,) = re.findall(r"\n```\w*\n(.*?)```\n", prompt, re.S)
    return doc


def test_the_shipped_file_is_the_generators_output_for_the_default_seed(tmp_path):
    out = tmp_path / "q.jsonl"
    assert generate.main(["--out", str(out)]) == 0
    assert SHIPPED.read_bytes() == out.read_bytes() == generate.dumps(0).encode()
    assert generate.dumps(1) != generate.dumps(0)


def test_ids_are_unique_and_each_row_is_one_short_prompt_of_an_edit_category():
    rows = shipped()
    ids = [r["question_id"] for r in rows]
    assert len(rows) == 24 and len(set(ids)) == len(ids)
    for r in rows:
        assert set(r) == {"question_id", "category", "turns", "source", "turn"}
        (p,) = r["turns"]
        assert isinstance(p, str) and len(p) <= generate.MAX_CHARS
        assert p.endswith({"edit_code": "file.", "edit_doc": "document."}[r["category"]])
    sources = defaultdict(set)
    for r in rows:
        sources[r["category"]].add(r["source"])
    assert {c: len(s) for c, s in sources.items()} == {"edit_code": 6, "edit_doc": 6}


def test_each_turn_carries_the_previous_document_with_its_edit_made():
    by_source = defaultdict(list)
    for r in shipped():
        by_source[r["source"]].append(r)
    chains = {s.name: (s, edits) for s, edits in generate.chains(0)}
    assert set(by_source) == set(chains)
    for name, rows in by_source.items():
        source, edits = chains[name]
        assert [r["turn"] for r in rows] == list(range(len(edits))) and len(rows) >= 2
        docs = [document(r["turns"][0]) for r in rows]
        assert docs[0] == source.text
        for t in range(1, len(rows)):
            prev, cur, edit = docs[t - 1], docs[t], edits[t - 1]
            assert rows[t - 1]["turns"][0].startswith(edit.instruction + "\n")
            assert cur == apply(prev, edit)
            assert set(cur.splitlines()) - set(prev.splitlines()), f"{name} turn {t}: no line changed"
            # a small edit: the rest of the document is carried over as it was
            assert difflib.SequenceMatcher(None, prev.splitlines(), cur.splitlines()).ratio() > 0.8


@pytest.mark.parametrize("seed", range(20))
def test_every_seed_gives_applicable_chains_within_the_limit(seed):
    rows = generate.rows(seed)  # raises if an edit does not apply or a prompt is too long
    assert len(rows) == 24 and all(len(r["turns"][0]) <= generate.MAX_CHARS for r in rows)


def test_apply():
    rename = Edit("", (("rate", "speed"),), everywhere=True)
    assert apply("rate = rate_limit(rate)\n", rename) == "speed = rate_limit(speed)\n"
    once = Edit("", (("x = 1\n", "x = 2\n"),))
    assert apply("a\nx = 1\n", once) == "a\nx = 2\n"
    for text, edit in [("x = 1\nx = 1\n", once), ("y = 1\n", once), ("rates\n", rename)]:
        with pytest.raises(ValueError):
            apply(text, edit)


def test_read_prompts_reads_the_workload():
    rows = read_prompts(str(SHIPPED))
    assert [(r["id"], r["category"], r["prompt"]) for r in rows] == [
        (str(d["question_id"]), d["category"], d["turns"][0]) for d in shipped()]
    assert [len(read_prompts(str(SHIPPED), categories=c)) for c in ("edit_code", "edit_doc")] == [12, 12]
