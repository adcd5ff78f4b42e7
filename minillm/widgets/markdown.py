"""A small Markdown → HTML renderer for the widgets' text (no extra dependency).

It knows the subset the course's question bank uses: paragraphs, `- ` bullet lists,
`1. ` numbered lists, **bold**, *italic*, `code` and fenced code blocks. Every piece of
text is HTML-escaped first, so a question about `x < y` shows as written.
"""

from __future__ import annotations

import html
import re


def _inline(text: str) -> str:
    """Escape HTML, then `code`, **bold**, *italic* (code spans are left untouched)."""
    parts = re.split(r"(`[^`]+`)", text)
    out = []
    for part in parts:
        if len(part) > 1 and part.startswith("`") and part.endswith("`"):
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
            continue
        part = html.escape(part, quote=False)
        part = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", part)
        part = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<i>\1</i>", part)
        out.append(part)
    return "".join(out)


def markdown_to_html(text: str) -> str:
    """The small Markdown subset the question bank uses, as HTML."""
    blocks, lines = [], text.strip("\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip().startswith("```"):                       # fenced code block
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                j += 1
            code = html.escape("\n".join(lines[i + 1:j]))
            blocks.append(f"<pre style='background:#f6f8fa;padding:6px'>{code}</pre>")
            i = j + 1
        elif re.match(r"\s*([-*]|\d+\.)\s+", line):              # a list
            ordered = bool(re.match(r"\s*\d+\.", line))
            items = []
            while i < len(lines) and lines[i].strip():
                item = re.match(r"\s*(?:[-*]|\d+\.)\s+(.*)", lines[i])
                if item:
                    items.append(item.group(1))
                elif items:
                    items[-1] += " " + lines[i].strip()          # continuation line
                i += 1
            tag = "ol" if ordered else "ul"
            blocks.append(f"<{tag}>" + "".join(f"<li>{_inline(t)}</li>" for t in items) + f"</{tag}>")
        elif not line.strip():
            i += 1
        else:                                                    # a paragraph
            para = []
            while (i < len(lines) and lines[i].strip() and not lines[i].strip().startswith("```")
                   and not re.match(r"\s*([-*]|\d+\.)\s+", lines[i])):
                para.append(lines[i].strip())
                i += 1
            blocks.append(f"<p>{_inline(' '.join(para))}</p>")
    return "\n".join(blocks)
