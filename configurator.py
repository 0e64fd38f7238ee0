# Config overrides, exec'd (never imported) by every script, as in nanoGPT:
# $ python train.py config/smoke.py --batch_size=32 --loops="(10,10)"
# A key keeps its type and must lie in its domain, and the rules across keys must hold
# (guards.KEYS declares both for each script).
# (Comments, not a docstring: the script's __doc__ stays its own, for --help.)
import ast, os, sys
import guards as _guards  # (importing it installs its excepthook: bad input is one line)

def _set(key, val, where=''):  # where: the config file that sets it
    old = globals().get(key)
    if isinstance(old, bool) and str(val).lower() in ('true', 'false'):
        val = str(val).lower() == 'true'
    elif isinstance(old, float) and (type(val) is int or str(val).lstrip('+-') in ('nan', 'inf')):
        val = float(val)
    elif isinstance(old, tuple) and type(val) in (int, float):
        val = (val,)  # --loops=4: one segment of 4
    _guards.check_set(key, val, _keys, where)  # a key it has (a typo: the closest), of its type
    globals()[key] = val
    _guards.GIVEN[key] = where  # set, whatever its value (where: '' = the command line)

_simple = (int, float, bool, str, tuple, type(None))  # keys, not modules, functions, ...
_keys = {k: v for k, v in globals().items() if k.islower() and k[0] != '_' and type(v) in _simple}
_guards.script_keys = _keys
_guards.GIVEN.clear()  # (a script run again in one process, as the tests do: its own keys only)
if {'-h', '--help'} & set(sys.argv[1:]):  # the script's docstring, keys and defaults
    print(__doc__.strip() + "\n\nkeys (--key=value), with their defaults:")
    print('\n'.join(f"  {k} = {v!r}" for k, v in _keys.items()))
    sys.exit(0)
for _arg in sys.argv[1:]:
    _guards.check_arg(_arg)  # not UTF-8, --key without =value, key=value without dashes
    if _arg.startswith('--'):
        _key, _, _text = _arg[2:].partition('=')
        try:  # a text key takes the text as typed (--start=1984); any other, a Python literal
            _val = _text if isinstance(globals().get(_key), str) else ast.literal_eval(_text)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            _val = _text  # a bare word (--compile=true); if the key takes no text, _set says so
        _set(_key, _val)
        _said = repr(globals()[_key])  # (a long prompt: shortened)
        _said = _said if len(_said) <= 100 else f"{_said[:80]}... ({len(_said):,} characters)"
        _said = f"Overriding: {_key} = {_said}"
    else:  # a config file (it may set nothing)
        for _key, _val in _guards.run_config(_arg, {}).items():  # its settings (Python's names)
            _set(_key, _val, f" (in {_arg})")
        _said = f"Overriding config with {_arg}"
    if os.environ.get('RANK', '0') == '0':  # under torchrun only rank 0 talks
        print(_said, file=sys.stderr)  # (stdout: what the script makes, a sample or a report)
_domain, _rules = _guards.KEYS.get(os.path.basename(__file__), ({}, []))  # values, rules
_guards.check_keys(_domain, _rules, globals(), _keys)  # (_keys: the defaults, valid values)
if os.environ.get('NANOLOOP_ARGS_ONLY'):  # tests: a command's arguments are fine; run nothing
    sys.exit(0)
