"""configurator.py's excepthook: bad input that nanoloop rejects on purpose gets one line; a bug keeps its traceback."""
import sys
from pathlib import Path

import torch

import eval as ev
from model import parse_exit

REPO = Path(__file__).resolve().parents[1]


def report(fail, capsys):
    """Raise fail() under the hook a script gets from configurator.py -> what it prints on stderr."""
    ns = {'__file__': str(REPO / 'script.py'), '__name__': 'script'}
    old_hook, old_argv = sys.excepthook, sys.argv
    sys.argv = ['script.py']
    try:
        exec((REPO / 'configurator.py').read_text(), ns)
        try:
            fail()
        except Exception as e:
            sys.excepthook(type(e), e, e.__traceback__)
    finally:
        sys.excepthook, sys.argv = old_hook, old_argv
    return capsys.readouterr().err


def test_bad_input_raised_on_purpose_is_one_line(capsys):
    err = report(lambda: parse_exit('entropy:0.5'), capsys)
    assert err == "error: exit_at='entropy:0.5': write 'maxprob:THRESHOLD' or 'resid:THRESHOLD', e.g. 'maxprob:0.9'\n"


def test_an_accidental_value_error_keeps_its_traceback(capsys):
    err = report(lambda: ev.pack_docs([['not a token id']], 0, 4), capsys)  # torch raises inside eval.py
    assert 'Traceback' in err and 'eval.py' in err and not err.startswith('error:')
    err = report(lambda: int('x'), capsys)
    assert 'Traceback' in err and "invalid literal for int()" in err
