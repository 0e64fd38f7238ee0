"""How the lab writes a results page. A measurement (timings, a comparison of two checkouts) is
checked before the work and never written over a page already there: that page is a committed
measurement, and a rerun on another machine lands elsewhere (move it away to measure again). A
page drawn from committed runs (a verdict, a table of them) is drawn again in place. Either way
the page is written whole or not at all (guards.written)."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
import guards  # (its entry handler: a refusal is one line)

def measured(path):  # -> write(text), to call once the work is done; refused now if path is there
    if os.path.exists(path):
        raise guards.InputError(f"{path} holds a committed measurement: it is kept; move it away "
                                "to measure again")
    return lambda text: drawn(path, text)

def drawn(path, text):  # a page drawn from committed runs: again in place, whole
    with guards.written(path) as f:
        f.write(text)
