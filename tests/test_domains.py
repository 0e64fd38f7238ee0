"""Issue 39: every key of every script declares its domain once (guards.KEYS: each script's table, the model's keys in
guards.MODEL_KEYS; the rules across keys, in words), and these tests are generated from those declarations, not from a hand list:
for every key, values just outside its domain and values of the wrong type must each give one `error:` line naming
the key, and nothing written; every rule across keys is broken by a search over values that each key's domain allows;
and a seeded random search over all keys (argument check only, NANOLOOP_ARGS_ONLY) meets no traceback. A key added
to a script is covered the day it is added: the script will not run until it declares its domain.

The scripts run in this process as `python SCRIPT ARGS` would (runpy): the same code and the same InputError that
the excepthook prints as `error: ...`, a few ms each; a few of the same cases run as processes at the end."""
import math, random, re, runpy, sys

import pytest
from model import GPT

import guards
import prepare
from guards import InputError, PATHS
from harness import REPO, one_line_error, run

SCRIPTS = ['train.py', 'eval.py', 'sample.py', 'prepare.py', 'bench.py', 'lab/frontier.py', 'lab/room/room.py']
CPU = {'prepare.py', 'lab/room/room.py'}  # (no --device: they run on the CPU only)
UNSET = '$NANOLOOP_NEVER_SET_VARIABLE'


def run_here(name, args, monkeypatch, capsys):
    """`python name args`, checking the arguments only -> ('ok', None) or ('error', the line) or ('crash', repr)."""
    monkeypatch.setattr(sys, 'argv', [name, *args])
    monkeypatch.setattr(sys, 'excepthook', sys.excepthook)  # configurator.py installs its own: put it back after
    monkeypatch.setenv('NANOLOOP_ARGS_ONLY', '1')
    try:
        runpy.run_path(str(REPO / name), run_name='__main__')
        outcome = ('ok', None)
    except InputError as e:
        outcome = ('error', f"error: {e}")
    except SystemExit as e:
        outcome = ('ok', None) if not e.code else ('crash', f"exit {e.code!r}")
    except Exception as e:  # a traceback
        outcome = ('crash', f"{type(e).__name__}: {e}")
    capsys.readouterr()
    return outcome


@pytest.fixture(scope='module')
def declared():
    """Each script's declarations, as configurator.py hands them to guards.check_keys: {script: (domain of each
    key, rules, defaults)}."""
    seen, check = {}, guards.check_keys
    mp = pytest.MonkeyPatch()
    mp.setattr(guards, 'check_keys', lambda table, rules, values, defaults: seen.update(
        table=guards.domains(table), rules=rules, defaults=dict(defaults)) or check(table, rules, values, defaults))
    out = {}
    for name in SCRIPTS:
        mp.setattr(sys, 'argv', [name, *(['--device=cpu'] if name not in CPU else [])])
        mp.setattr(sys, 'excepthook', sys.excepthook)
        mp.setenv('NANOLOOP_ARGS_ONLY', '1')
        with pytest.raises(SystemExit) as e:
            runpy.run_path(str(REPO / name), run_name='__main__')
        assert e.value.code in (0, None)
        out[name] = (seen['table'], seen['rules'], seen['defaults'])
    mp.undo()
    return out


def constants(domain):
    """The numbers a domain names (its bounds), and 0 and 1."""
    return sorted({0, 1, *(eval(n) for n in re.findall(r'(?<![\w.])\d+(?:\.\d+)?(?:e-?\d+)?(?:\*\*\d+)?', domain))})


def finite(v):  # (and within float32's range)
    return all(math.isfinite(x) and abs(x) < 3e38 for x in (v if type(v) is tuple else (v,)) if type(x) is float)


def inside(domain, v):
    return domain in ('any', *PATHS) or finite(v) and guards.holds(domain, {'x': v})


def candidates(domain, default):
    """Values of the key's type, at, just beside and beyond the numbers its domain names, and its choices."""
    cs = constants(domain)
    ints = {c + d for c in cs for d in (-1, 0, 1, 2)} | {2 * c for c in cs}
    ints = {int(i) for i in ints if abs(i) < 2 ** 70}
    floats = {float(c) + d for c in cs for d in (-1e-9, 0, 1e-9, -1, 1, 0.5)} | {math.inf, -math.inf, 1e300, -1e300}
    kind = type(default)
    if kind is bool:
        return [True, False]
    if kind is int:
        return sorted(ints)
    if kind is float:
        return sorted(floats)
    if kind is str:
        return [*re.findall(r"'([^']*)'", domain), 'nonesuch', '', 'x' * 3]
    tuples = [(), *((i,) for i in sorted(ints)), (1.5,), ('a',), (1, 1), (1, 2), (2, 1), (1, 2, 3), (0.5, 2.0)]
    return tuples + ([None, *sorted(ints)] if default is None else [])


def outside(domain, default, key):
    """The values just outside the key's domain: generated from the declaration."""
    if domain in PATHS:
        bad = [f'~nobody_at_all_{key}/run', f'{UNSET}/run', 'run\tx', ' run', 'run ']
        bad += [''] if default != '' else []
        bad += {'name': ['a/b', '..'], 'new folder': ['a_file'], 'new file': ['a_folder']}.get(domain, [])
        return bad
    return [v for v in candidates(domain, default) if not inside(domain, v)]


def typed(key, v):  # as a user types it: text as is, numbers and tuples as Python literals (inf as 1e999)
    return f'--{key}={v}' if type(v) is str else f'--{key}={v!r}'.replace('inf', '1e999')


def wrong_type(default):
    return {int: ['1.5', 'abc', '(1,)'], float: ['abc', '(1.0,)'], bool: ['2', 'yes'], tuple: ['abc', "{'a': 1}"],
            type(None): ['abc', '1.5']}.get(type(default), [])


def cases(declared):
    """(script, key, argument) for every key of every script: each value just outside, each of the wrong type."""
    for name, (table, _, defaults) in declared.items():
        for key, default in defaults.items():
            domain = table[key]
            for v in outside(domain, default, key):
                if type(v) is float and math.isnan(v):
                    continue  # (no way to type it: 'nan' is text, refused as the wrong type below)
                yield name, key, domain, typed(key, v)
            for text in wrong_type(default):
                yield name, key, domain, f'--{key}={text}'


@pytest.fixture
def here(tmp_path, monkeypatch):
    (tmp_path / 'a_file').write_text('x')
    (tmp_path / 'a_folder').mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(UNSET[1:], raising=False)
    return tmp_path


def listing(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob('*'))


def test_every_key_declares_its_domain_once(declared):
    DOMAIN = guards.MODEL_KEYS
    for name, (table, rules, defaults) in declared.items():
        assert set(defaults) <= set(table), name  # (check_keys refuses to run otherwise)
        model_only = set(guards.domains(DOMAIN)) - set(defaults)
        assert set(table) - set(defaults) <= model_only, f"{name} declares keys it does not have"
        for key, default in defaults.items():
            if default is not None:
                assert inside(table[key], default), f"{name}: the default {key}={default!r} is outside its domain"
    import ast  # each key once: no key in two groups of one table (guards.KEYS, as written)
    tree = ast.parse((REPO / 'guards.py').read_text())
    keys = next(n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == 'KEYS')
    for name, entry in zip(keys.keys, keys.values):
        groups = [k.value for k in entry.elts[0].keys if k is not None]  # (None: **MODEL_KEYS)
        flat = [k for group in groups for k in group.split()]
        assert len(flat) == len(set(flat)), f"{name.value}: a key declared twice"
    assert {k.value for k in keys.keys} == {s.rpartition('/')[2] for s in SCRIPTS}  # (by basename)


def test_every_domain_has_values_just_outside_it(declared):
    """The generator finds a value just outside every domain but 'any' (else the next test would test nothing)."""
    for name, (table, _, defaults) in declared.items():
        for key, default in defaults.items():
            if table[key] != 'any':
                assert outside(table[key], default, key), f"{name} --{key}: no value outside {table[key]!r}"
    assert len(list(cases(declared))) > 300


PYTHON = re.compile(r"\b(type|all|any|len|isinstance)\(|\bfor \w+ in\b|\.startswith\(|\bis None\b|\bnot in\b")


def test_a_value_outside_its_domain_or_of_the_wrong_type_is_one_error_line(declared, here, monkeypatch, capsys):
    """... naming the key, and saying what it needs in words, never in the rule's Python (issue 47)."""
    before, failures = listing(here), []
    for name, key, domain, arg in cases(declared):
        kind, line = run_here(name, [arg] + (['--device=cpu'] if name not in CPU else []), monkeypatch,
                              capsys)
        if kind != 'error' or f'--{key}' not in line and f"'--{key}" not in line or PYTHON.search(line or ''):
            failures.append(f"{name} {arg!r} ({domain}): {kind} {line}")
    assert not failures, '\n'.join(failures[:30]) + f"\n({len(failures)} cases)"
    assert listing(here) == before  # nothing written


def test_a_value_typed_in_a_config_file_is_checked_the_same(declared, here, monkeypatch, capsys):
    """float('nan') can only come from a config file; a config file's values go through the same check."""
    (here / 'nan.py').write_text("learning_rate = float('nan')\n")
    kind, line = run_here('train.py', ['nan.py'], monkeypatch, capsys)
    assert kind == 'error' and 'learning_rate' in line and 'float32 range' in line


def test_a_path_is_expanded_as_a_shell_would_after_an_equals_sign(declared, here, monkeypatch, capsys):
    """bash leaves --out_dir=~/run and --out_dir=$HOME/run alone after '='; the scripts expand them."""
    monkeypatch.setenv('HOME', str(here / 'home'))
    monkeypatch.setenv('RUNS', str(here / 'runs'))
    values = {}
    check = guards.check_keys
    monkeypatch.setattr(guards, 'check_keys', lambda t, r, v, d: check(t, r, v, d) or values.update(v))
    assert run_here('train.py', ['--out_dir=~/run', '--device=cpu'], monkeypatch, capsys)[0] == 'ok'
    assert values['out_dir'] == str(here / 'home' / 'run')
    assert run_here('sample.py', ['--out_dir=$RUNS/a,~/b', '--device=cpu'], monkeypatch, capsys)[0] == 'ok'
    assert values['out_dir'] == f"{here / 'runs' / 'a'},{here / 'home' / 'b'}"
    kind, line = run_here('train.py', [f'--out_dir={UNSET}/run', '--device=cpu'], monkeypatch, capsys)
    assert kind == 'error' and f"'{UNSET}' is left as typed: an unset $VAR" in line
    assert listing(here) == ['a_file', 'a_folder']  # no folder named '~' or '$...'


def test_every_rule_across_keys_is_broken_by_values_each_domain_allows(declared, here, monkeypatch, capsys):
    """For each rule, a seeded search over values inside every key's domain finds some that break the rule; the
    script must refuse them in one line that says the rule in words."""
    rng = random.Random(39)
    for name, (table, rules, defaults) in declared.items():
        for rule, words in rules:
            keys = [k for k in dict.fromkeys(re.findall(r'[a-z_]+', rule)) if k in defaults]
            pools = {k: [v for v in candidates(table[k], defaults[k]) if inside(table[k], v)] + [defaults[k]]
                     for k in keys}
            for _ in range(2000):
                pick = {k: rng.choice(pools[k]) for k in keys}
                values = {**defaults, **pick}
                if not guards.holds(rule, {**values, 'changed': {k for k in defaults if values[k] != defaults[k]}}):
                    break
            else:
                raise AssertionError(f"{name}: no values inside the domains break {rule!r}")
            args = [typed(k, v) for k, v in pick.items()] + (['--device=cpu'] if name not in CPU else [])
            kind, line = run_here(name, args, monkeypatch, capsys)
            assert kind == 'error' and words in line, (name, args, kind, line)
            assert rule not in line  # (words, never the rule's Python)


POOL = ['', '0', '-1', '1', '2', '1.5', '-0.5', '1e999', '-1e999', '1e-300', '10**9', '99999999999999999999999', '()',
        '(0,)', '(1,)', '(2, 3)', '(1.5,)', "('a',)", '((1,),)', '[1]', '{}', 'None', 'True', 'False', 'nan', 'abc',
        'a,b', ',', '~/x', '~nobody_at_all/x', '$HOME/x', f'{UNSET}/x', 'a_file', 'a_folder', '.', '..', '/', 'é',
        '\t', ' x', 'maxprob:0.9', 'resid:-1', 'learned:2', 'maxprob:nan', 'x:1', 'FILE:a_folder', 'FILE:nofile']


def test_a_random_search_over_all_keys_meets_no_traceback(declared, here, monkeypatch, capsys):
    rng, crashes = random.Random(1), []
    for _ in range(400):
        name = rng.choice(SCRIPTS)
        table, _, defaults = declared[name]
        keys = rng.sample(sorted(defaults), rng.randint(1, 3))
        args = []
        for k in keys:  # a value from the pool, or one beside the key's domain
            near = [typed(k, v) for v in candidates(table[k], defaults[k]) if not (type(v) is float and math.isnan(v))]
            args.append(rng.choice([f'--{k}={rng.choice(POOL)}', rng.choice(near or [f'--{k}=1'])]))
        kind, line = run_here(name, args, monkeypatch, capsys)
        if kind == 'crash' or kind == 'error' and '\n' in line:
            crashes.append(f"{name} {args}: {line}")
    assert not crashes, '\n'.join(crashes[:20])
    assert listing(here) == ['a_file', 'a_folder']


# ---------------------------------------------------------------- the same, as processes: exit 1, one line, nothing
@pytest.mark.slow
def test_generated_cases_as_processes(declared, tmp_path):
    """The first generated case of each script, and its first path case, as `python SCRIPT ARG` in a process."""
    picked = {}
    for name, key, domain, arg in cases(declared):
        picked.setdefault((name, domain in PATHS), (name, arg))
    (tmp_path / 'a_file').write_text('x')
    for name, arg in picked.values():
        r = run(tmp_path, name, arg, *(['--device=cpu'] if name not in CPU else []))
        assert r.returncode == 1, (arg, r.stderr)
        one_line_error(r, arg.partition('=')[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ['a_file']  # nothing written


# ---------------------------------------------------------------- data and its metadata agree
GOOD = {'tokenizer': 'byte', 'vocab_size': 257, 'eot': 256, 'dtype': 'uint16'}


@pytest.mark.parametrize('meta,size,words', [
    ({**GOOD, 'vocab_size': 300}, 20, ["tokenizer 'byte', eot 256, vocab_size 300", 'byte with eot 256, vocab_size 257']),
    ({**GOOD, 'eot': 0}, 20, ['eot 0']),
    ({**GOOD, 'tokenizer': 'bpe'}, 20, ["tokenizer 'bpe'"]),
    ({**GOOD, 'dtype': 'float32'}, 20, ["dtype 'float32'", "dtype 'uint16'"]),
    ({**GOOD, 'dtype': 'uint8'}, 20, ["dtype 'uint8'", "dtype 'uint16'"]),  # (too narrow for EOT 256)
    ({**GOOD, 'vocab_size': 257.0}, 20, ['vocab_size 257.0', 'vocab_size 257']),  # not a whole number
    (GOOD, 21, ['train.bin is unusable', 'multiple']),
    ({**GOOD, 'tokenizer': ['byte']}, 20, ["tokenizer ['byte']"]),
    ({**GOOD, 'row': -5}, 20, ['row -5', 'a row 0 (sft: 2 or more)']),
])
def test_metadata_that_disagrees_with_its_data_is_named(meta, size, words, tmp_path, monkeypatch):
    """meta.json against the tokenizer it names and the token files it describes: one line, the file, the fix."""
    import json
    d = tmp_path / 'data' / 'topics_byte'
    d.mkdir(parents=True)
    (d / 'meta.json').write_text(json.dumps(meta))
    (d / 'train.bin').write_bytes(bytes(size))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as e:
        prepare.load_tokens('data/topics_byte', 'train')
    line = str(e.value)
    assert '\n' not in line and 'python prepare.py --dataset=topics --tokenizer=byte' in line
    for w in words:
        assert w in line, line


def test_a_key_typed_without_its_dashes_is_named(here, monkeypatch, capsys):
    """batch_size=3 and -batch_size=3 used to be read as config files: 'config file batch_size=3 not found'."""
    for arg in ('batch_size=3', '-batch_size=3'):
        kind, line = run_here('sample.py', [arg], monkeypatch, capsys)
        assert kind == 'error' and 'neither --key=value nor a config file' in line and '--batch_size=3' in line


def test_a_checkpoint_without_the_data_it_names_is_one_line(tmp_path):
    """A checkpoint whose meta lacks its tokenizer, or its config its dataset, used to be a KeyError later."""
    import torch
    from test_bad_input_kinds import save_model
    save_model(tmp_path / 'out')
    for part, key in (('meta', 'tokenizer'), ('config', 'dataset')):
        ckpt = torch.load(tmp_path / 'out' / 'ckpt.pt', weights_only=True)
        del ckpt[part][key]
        torch.save(ckpt, tmp_path / f'{part}.pt')
        with pytest.raises(InputError, match=rf"is not a checkpoint .*KeyError: '{key}'"):
            guards.load_checkpoint(str(tmp_path / f'{part}.pt'), GPT.from_checkpoint)


def test_nan_and_inf_are_out_of_range_and_an_idle_key_names_what_it_needs(here, monkeypatch, capsys):
    """nan and inf are floats out of range (not 'of the wrong type'); a key that acts only with another says so."""
    for text in ('nan', 'inf', '-inf'):
        kind, line = run_here('train.py', [f'--learning_rate={text}', '--device=cpu'], monkeypatch, capsys)
        assert kind == 'error' and 'float32 range' in line and 'of type' not in line, line
    kind, line = run_here('train.py', ['--exit_beta=0.3', '--device=cpu'], monkeypatch, capsys)
    assert kind == 'error' and line.startswith('error: --exit_beta=0.3 ') and 'does nothing without exit_gate' in line
