"""User text in Streamlit's Markdown: shown as typed."""

from __future__ import annotations

import re

_INLINE = re.compile(r"([\\`*_\[\]<>$~:|&#!{}])")  # emphasis, code, links, HTML, LaTeX, :emoji: / :red[...]
_LINE_START = re.compile(r"(?m)^([ \t]*)(?:([-+=])|(\d+)([.)]))")  # lists, setext headings


def md(text: str) -> str:
    """User text (a prompt, a file or model name, an error about them) for st.caption / st.error /
    st.markdown without HTML: shown as typed, never as Markdown, LaTeX ($...$), an emoji or colour
    directive (:red[...]) or HTML. The characters that mean something there are backslash-escaped
    (CommonMark), the others left as they are (names stay readable in the Markdown source); line
    breaks are kept."""
    s = _INLINE.sub(r"\\\1", str(text))
    s = _LINE_START.sub(lambda m: m.group(1) + (f"\\{m.group(2)}" if m.group(2) else f"{m.group(3)}\\{m.group(4)}"), s)
    return s.replace("\n", "  \n")
