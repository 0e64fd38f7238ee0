"""GUIDE.md quotes only code that exists: every backticked span in the last column of its concept table
must appear, whitespace aside, in the file that the row's 'where' column names first."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def quotes(guide):
    """-> [(file, quoted code)] from the concept table of a GUIDE.md text."""
    out = []
    for line in guide.splitlines():
        cells = [c.strip() for c in re.split(r'(?<!\\)\|', line)[1:-1]]  # '\|' is a '|' inside code
        file = re.search(r'[\w/]+\.py', cells[1]) if len(cells) == 3 else None
        if file:
            out += [(file.group(0), q.replace('\\|', '|')) for q in re.findall(r'`([^`]+)`', cells[2])]
    return out


def missing(guide):
    squash = lambda text: ' '.join(text.split())
    return [(f, q) for f, q in quotes(guide) if squash(q) not in squash((REPO / f).read_text())]


def test_guide_quotes_only_lines_that_exist():
    guide = (REPO / 'GUIDE.md').read_text()
    found = quotes(guide)
    assert len(found) >= 25 and {f for f, _ in found} >= {'model.py', 'train.py', 'eval.py'}
    assert missing(guide) == [], "GUIDE.md quotes code that its file does not hold"


def test_a_quote_that_is_not_in_the_file_is_caught():
    row = "| the tied loop | `model.py`: `Loop.forward` | `z_new = z + alpha * (self.block(z) - z)` |"
    assert missing(row) == [('model.py', 'z_new = z + alpha * (self.block(z) - z)')]
    assert missing("| x | `model.py` | `return z + self.alpha() * (self.block(z, cache, (segment, i)) - z)` |") == []
