"""
Depth maps: each token coloured by how many loop iterations it got, in a terminal (sample.py
--show_depth=True) and as an HTML page (eval.py --html=map.html).
"""
from html import escape as esc

palette = [21, 27, 33, 39, 45, 51, 50, 49, 48, 82, 118, 154, 190, 226, 220, 214, 208, 202, 196]

def paint(text, depth, max_depth):
    """The seed's depth map in a terminal: a background from blue (1 loop) to red (the most)."""
    colour = palette[round((depth - 1) / max(max_depth - 1, 1) * (len(palette) - 1))]
    return f"\033[48;5;{colour}m\033[30m{text}\033[0m"

def span(text, depth, max_depth):  # the same in HTML, escaped: blue (no loop) to red (the most)
    hue = 220 - 220 * depth / max_depth
    return f'<span style="background:hsl({hue:.0f},85%,82%)">{esc(text)}</span>'

def legend(max_depth):  # the terminal map's key: the shallowest, a middle and the deepest colour
    shown = sorted({1, (1 + max_depth) // 2, max_depth})
    return 'loop depth: ' + " ".join(paint(f" {d} ", d, max_depth) for d in shown)

MARKS = '123456789abcdefghijklmnopqrstuvwxyz'  # a depth as one character: 1-9, then a=10 ... z=35

def mark(text, depth, max_depth):  # the map in a file or a pipe (no colours): each character's
    return ''.join(c if c == '\n' else MARKS[min(depth, len(MARKS)) - 1] for c in text)  # depth

def pieces(ids, decode):
    """-> [(text, i, j)]: runs ids[i:j], each grown until it decodes whole ('£' is 2 bytes)."""
    out, i = [], 0
    for j in range(1, len(ids) + 1):
        if j == len(ids) or decode(ids[i:j + 1]) == decode(ids[i:j]) + decode(ids[j:j + 1]):
            out, i = out + [(decode(ids[i:j]), i, j)], j
    return out

def painted(ids, depth, decode, max_depth, paint=paint):
    """The tokens ids as text, each character painted by its token's depth (depth (N,)): a
    character of several tokens takes the most any one of them had."""
    return "".join(paint(text, depth[i:j].max().item(), max_depth)
                   for text, i, j in pieces(ids, decode))

def html_page(docs, tokens, depth, decode, what):
    """The depth map as a page: each predicted token coloured by its depth (N, T - 1), from
    `what`. Every text is escaped: a document may hold markup."""
    hi = max(int(depth.max()), 1)
    key = ''.join(span(f'\xa0{d}\xa0', d, hi) for d in range(int(depth.min()), hi + 1))
    page = [f'<!doctype html><meta charset="utf-8"><title>nanoloop depth map</title><body>'
            f'<h2>Loop depth per token</h2><p>Colour: {esc(what)}: {key}</p>']
    for doc, toks, row in zip(docs, tokens, depth):  # (the first token is predicted by nothing)
        spans = esc(decode(toks[:1])) + painted(toks[1:len(row) + 1], row, decode, hi, span)
        page.append(f'<h3>{esc(doc["topic"])}</h3><pre>{spans}</pre>')
    return '\n'.join(page) + '</body>\n'
