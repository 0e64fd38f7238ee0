"""configurator.py's excepthook: bad input that nanoloop rejects on purpose gets one line; a bug keeps its traceback.
Its -h / --help, and the checks a library user meets without it (GPTConfig's rules, parse_exit)."""
import runpy, sys
from pathlib import Path

import pytest
import torch

import eval as ev
from model import GPTConfig
from guards import InputError, parse_exit

REPO = Path(__file__).resolve().parents[1]


def report(fail, capsys):
    """Raise fail() under the hook a script gets from configurator.py -> what it prints on stderr."""
    ns = {'__file__': str(REPO / 'script.py'), '__name__': 'script'}  # (a script without keys)
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
    assert err == ("error: --exit_at=entropy:0.5: write maxprob:T (0 <= T <= 1) or resid:T (T >= 0), "
                   "e.g. --exit_at=maxprob:0.9\n")


def test_an_accidental_value_error_keeps_its_traceback(capsys):
    err = report(lambda: ev.pack_docs([['not a token id']], 0, 4), capsys)  # torch raises inside eval.py
    assert 'Traceback' in err and 'eval.py' in err and not err.startswith('error:')
    err = report(lambda: int('x'), capsys)
    assert 'Traceback' in err and "invalid literal for int()" in err


def script(name, *args, monkeypatch):
    """Run a script here as `python name args` would -> its SystemExit code, or the line its bad
    input prints."""
    monkeypatch.setattr(sys, 'argv', [name, *args])
    monkeypatch.setattr(sys, 'excepthook', sys.excepthook)  # configurator.py sets its own: undo it
    with pytest.raises((SystemExit, InputError)) as e:
        runpy.run_path(str(REPO / name), run_name='__main__')
    return f"error: {e.value}" if isinstance(e.value, InputError) else e.value.code


@pytest.mark.parametrize('name,flag,first_line,key', [
    ('sample.py', '-h', 'Sample from a trained tied-depth model', '  max_new_tokens = 200'),
    ('train.py', '--help', 'Train a tied-depth GPT.', '  n_embd = 128'),  # a GPTConfig field too
    ('prepare.py', '-h', 'Download (with requests)', "  data_root = 'data'")])
def test_help_prints_the_docstring_and_the_keys(name, flag, first_line, key, tmp_path, monkeypatch,
                                                capsys):
    monkeypatch.chdir(tmp_path)  # it used to say "config file '-h' not found"
    assert script(name, '--max_new_tokens=5', flag, monkeypatch=monkeypatch) in (0, None)
    out = capsys.readouterr().out
    assert out.startswith(first_line) and key in out.splitlines()
    assert 'config_keys' not in out and 'HOST' not in out  # keys only: not lists, not constants
    assert 'Overriding' not in out  # nothing was set
    assert list(tmp_path.iterdir()) == []


def test_argument_that_is_not_utf8_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # b'caf\xe9' on the command line reaches Python as 'caf\udce9'
    code = script('train.py', '--out_dir=caf\udce9', monkeypatch=monkeypatch)
    assert code.startswith('error: --out_dir holds bytes that are not UTF-8')
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize('exit_at', ['maxprob:nan', 'maxprob:-0.1', 'maxprob:1.1', 'learned:2', 'resid:-1',
                                     'resid:nan'])
def test_an_exit_that_can_never_fire_is_refused(exit_at):
    with pytest.raises(ValueError, match=f"--exit_at={exit_at}:"):
        parse_exit(exit_at)


def test_an_exit_at_the_edges_is_accepted():  # (resid:0 never exits: a run at the full depth)
    assert [parse_exit(s) for s in ('maxprob:0', 'maxprob:1', 'resid:0', 'resid:0.05')] == \
        [('maxprob', 0.0), ('maxprob', 1.0), ('resid', 0.0), ('resid', 0.05)]


@pytest.mark.parametrize('kw,message', [
    (dict(act=True, phantom=True), "GPTConfig: act picks each token's depth: it takes neither"),
    (dict(n_embd=30, n_head=4), 'GPTConfig: n_embd must be a multiple of n_head'),
    (dict(loops=(2,), supervise=(3,)), 'GPTConfig: supervise lists depths once, in increasing order, up to the last (2)'),
    (dict(alpha_init=1.0), "GPTConfig: alpha_init is a sigmoid's value: between 0 and 1")])
def test_gpt_config_checks_its_rules_for_a_library_user(kw, message):
    """model.py as a library, without configurator.py: ACT used to ignore phantom without a word."""
    with pytest.raises(ValueError) as e:
        GPTConfig(**kw)
    assert message in str(e.value) and '\n' not in str(e.value)


def test_a_config_file_that_sets_nothing_is_fine(tmp_path, monkeypatch, capsys):
    """It used to be a NameError traceback: the echo showed the last key set, and there was none."""
    (tmp_path / 'empty.py').write_text('# nothing set yet\n')
    monkeypatch.setenv('NANOLOOP_ARGS_ONLY', '1')
    assert script('sample.py', str(tmp_path / 'empty.py'), monkeypatch=monkeypatch) == 0
    assert f"Overriding config with {tmp_path / 'empty.py'}" in capsys.readouterr().err  # (stderr)


def test_an_include_of_a_missing_file_names_that_file(tmp_path):
    """include('missing.py') in a config file: the line names the file that is missing, as for a config file given
    on the command line (wrapped in the including file's line, it read 'line 1: InputError: config file ...')."""
    import guards
    (tmp_path / 'a.py').write_text("include('missing.py')\n")
    with pytest.raises(InputError) as e:
        guards.run_config(str(tmp_path / 'a.py'), {})
    assert str(e.value).startswith(f"config file {tmp_path / 'missing.py'}: No such file or directory"), e.value


@pytest.mark.parametrize('name,arg,words', [
    ('train.py', '--n_layer=12', 'nanoloop has no n_layer: the depth is n_prelude + sum(loops) + n_coda'),
    ('train.py', '--wandb_log=True', "nanoloop has no wandb_log: no wandb: the run's log is what train.py prints"),
    ('sample.py', '--init_from=resume', "nanoloop has no init_from: sample.py and eval.py read --out_dir's checkpoint"),
    ('train.py', '--init_from=gpt2-xl', 'no checkpoint at gpt2-xl/ckpt.pt: nanoloop has no GPT-2 weights'),
    ('sample.py', '--dtype=float16', "--dtype=float16: need empty (the default), float32 or bfloat16; no float16")])
def test_nanogpt_settings_are_told_what_stands_for_them(name, arg, words, tmp_path, monkeypatch):
    """A nanoGPT user's settings: --n_layer used to get 'did you mean --n_head?', --wandb_log 'did you mean
    --eval_only?', --init_from=gpt2 a list of checkpoints, --dtype=float16 the rule's Python."""
    monkeypatch.chdir(tmp_path)
    error = script(name, arg, monkeypatch=monkeypatch)
    assert words in error and 'did you mean' not in error, error


def test_a_config_file_with_a_byte_order_mark_is_read(tmp_path, monkeypatch, capsys):
    """A config file saved with a UTF-8 BOM (Notepad does) used to be 'SyntaxError: invalid non-printable
    character U+FEFF'; Python itself reads such a file."""
    (tmp_path / 'bom.py').write_bytes('\ufeffnum_samples = 2  # caf\u00e9\n'.encode('utf-8'))
    monkeypatch.setenv('NANOLOOP_ARGS_ONLY', '1')
    assert script('sample.py', str(tmp_path / 'bom.py'), monkeypatch=monkeypatch) == 0
    assert f"Overriding config with {tmp_path / 'bom.py'}" in capsys.readouterr().err
