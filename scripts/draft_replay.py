"""Replay greedy drafting without a model: the tokens/step a drafter would reach on known greedy outputs.

Under greedy decoding a step accepts the longest branch of its draft that equals the greedy
continuation and commits one token more, so for a drafter that looks only at the text (prompt
lookup, suffix drafting without its fallback) tokens/step follows from the greedy output alone:

    python scripts/draft_replay.py --rows out/bench_edits.jsonl --prompts benchmarks/edits/question.jsonl \
        --drafter pld --drafter suffix:fallback=false --drafter suffix:fallback=false:offset=0

``--rows``: a ``python -m decoding bench`` output (its AR rows carry the greedy output ids); the prompts
file rebuilds their prompt ids (``--chat`` as the bench ran; checked against the row's token count).
Prints tokens/step per category and overall (total tokens / total steps) per drafter. A tuning tool:
the numbers equal a real greedy run's only for drafters without a model-fed fallback.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from types import SimpleNamespace

from decoding.methods import resolve_params
from decoding.methods.pld import find_draft
from decoding.methods.suffix import SuffixDrafting


def parse_drafter(text: str) -> tuple[str, dict]:
    name, *pairs = text.split(":")
    params = {}
    for p in pairs:
        k, _, v = p.partition("=")
        params[k] = {"true": True, "false": False}.get(v.lower(), v)
        if isinstance(params[k], str):
            try:
                params[k] = int(v)
            except ValueError:
                params[k] = v
    return name, params


def accepted(tree_nodes, truth: list[int]) -> int:
    """Depth of the deepest draft node whose path equals the start of ``truth``."""
    ok = {-1: 0}
    best = 0
    for i, n in enumerate(tree_nodes):  # parents come before children
        d = ok.get(n.parent)
        if d is not None and d < len(truth) and truth[d] == n.token:
            ok[i] = d + 1
            best = max(best, d + 1)
    return best


class PldReplay:
    def __init__(self, prompt, params):
        p = resolve_params("pld", params)  # the registry's defaults, validated
        self.k, self.n = p["k"], p["max_ngram"]

    def step(self, all_ids, room, truth):
        draft, _, _ = find_draft(all_ids, min(self.k, room), self.n)
        a = 0
        while a < len(draft) and a < len(truth) and draft[a] == truth[a]:
            a += 1
        return a, len(draft)

    def commit(self, tokens):
        pass


class SuffixReplay:
    def __init__(self, prompt, params):
        p = resolve_params("suffix", {**params, "budget": "fixed"})
        self.m = SuffixDrafting(SimpleNamespace(all_ids=list(prompt), prompt_ids=list(prompt), costs=None), p)

    def step(self, all_ids, room, truth):
        tree, _ = self.m.draft(all_ids[-1], room)
        return accepted(tree.nodes, truth), len(tree.nodes)

    def commit(self, tokens):
        for t in tokens:
            self.m.trie.extend(t)


DRAFTERS = {"pld": PldReplay, "suffix": SuffixReplay}


def replay(name: str, params: dict, prompt: list[int], output: list[int]) -> tuple[int, int, int]:
    """(tokens, steps, drafted tokens) of one greedy run replayed."""
    d = DRAFTERS[name](prompt + output[:1], params)
    i, steps, fed = 1, 0, 0  # output[0] comes from the prefill
    while i < len(output):
        room = len(output) - i - 1
        a, n = d.step(prompt + output[:i], room, output[i:]) if room > 0 else (0, 0)
        a = min(a, room)
        d.commit(output[i:i + a + 1])
        i += a + 1
        steps += 1
        fed += n
    return len(output), steps, fed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", required=True, action="append")
    ap.add_argument("--prompts", required=True, action="append")
    ap.add_argument("--chat", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--drafter", action="append", required=True, help="name[:key=value...] (pld, suffix)")
    args = ap.parse_args()
    from transformers import AutoTokenizer

    from decoding.model import bundled_folder
    tok = AutoTokenizer.from_pretrained(str(bundled_folder()))
    text = {}
    for f in args.prompts:
        for line in open(f):
            q = json.loads(line)
            text[str(q["question_id"])] = q["turns"][0]
    runs, seen = [], set()
    for f in args.rows:
        for line in open(f):
            r = json.loads(line)
            if r["method"] != "ar" or (r["id"], f) in seen or str(r["id"]) not in text:
                continue
            seen.add((r["id"], f))
            ids = tok.apply_chat_template([{"role": "user", "content": text[str(r["id"])]}],
                                          add_generation_prompt=True, tokenize=True) if args.chat else tok(text[str(r["id"])])
            ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
            if len(ids) != r["prompt_tokens"]:
                raise SystemExit(f"prompt {r['id']}: {len(ids)} tokens, the bench had {r['prompt_tokens']} (--chat?)")
            runs.append((r["category"], ids, r["output_ids"]))
    print(f"{len(runs)} greedy runs")
    for spec in args.drafter:
        name, params = parse_drafter(spec)
        tot = defaultdict(lambda: [0, 0, 0])
        for cat, ids, out in runs:
            t, s, f = replay(name, params, ids, out)
            for key in (cat, "ALL"):
                tot[key][0] += t
                tot[key][1] += s
                tot[key][2] += f
        cells = "  ".join(f"{k} {v[0] / v[1]:.2f}" for k, v in sorted(tot.items()))
        print(f"{spec:50s} {cells}  (drafted/step {tot['ALL'][2] / tot['ALL'][1]:.1f})")


if __name__ == "__main__":
    main()
