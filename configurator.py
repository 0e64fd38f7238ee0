"""
Config overrides, exec'd (never imported) by every script, as in nanoGPT:
$ python train.py config/smoke.py --batch_size=32 --loops=(10,10)
A config file sets globals; --key=value then overrides one. Every key must already exist
as a global of the script, with the same type, so typos and wrong types fail at once with
a one-line message instead of silently training the wrong model.
"""
import os
import sys
from ast import literal_eval
from difflib import get_close_matches

def _user_error_hook(kind, err, tb, _default=sys.excepthook):
    # bad input (ValueError / FileNotFoundError raised with a full message) gets one line, not a traceback
    if issubclass(kind, (ValueError, FileNotFoundError)) and not issubclass(kind, UnicodeError):
        print(f"error: {err}", file=sys.stderr)
    else:
        _default(kind, err, tb)
sys.excepthook = _user_error_hook

def _set(key, val, where):
    if key not in globals() or key.startswith('_'):
        near = get_close_matches(key, [k for k in globals() if not k.startswith('_')], n=1)
        sys.exit(f"error: unknown config key '{key}' ({where})" + (f"; did you mean '{near[0]}'?" if near else ""))
    old = globals()[key]
    if isinstance(old, bool) and isinstance(val, str) and val.lower() in ('true', 'false'):
        val = val.lower() == 'true'
    elif isinstance(old, float) and type(val) is int:
        val = float(val)
    elif isinstance(old, tuple) and type(val) is int:
        val = (val,)  # --loops=4 means one segment of 4
    if old is not None and type(val) is not type(old):
        sys.exit(f"error: {key} must be of type {type(old).__name__} (like {old!r}), got {val!r} ({where})")
    globals()[key] = val

for _arg in sys.argv[1:]:
    if not _arg.startswith('--'):  # a config file
        try:
            _src = open(_arg).read()
        except OSError:
            sys.exit(f"error: config file '{_arg}' not found (see config/ for the available ones)")
        if os.environ.get('RANK', '0') == '0':  # under torchrun only rank 0 talks
            print(f"Overriding config with {_arg}")
        _cfg = {}
        # include('v5.py') inside a config file runs another config of the same folder first (its base)
        _include = lambda name, _dir=os.path.dirname(_arg): exec(open(os.path.join(_dir, name)).read(), {'include': _include}, _cfg)
        exec(_src, {'include': _include}, _cfg)
        for _k, _v in _cfg.items():
            if not _k.startswith('_') and not isinstance(_v, type(sys)):  # skip imports
                _set(_k, _v, _arg)
    else:
        if '=' not in _arg:
            sys.exit(f"error: '{_arg}' needs a value: write {_arg}=VALUE")
        _k, _v = _arg[2:].split('=', 1)
        try:
            _v = literal_eval(_v)
        except (SyntaxError, ValueError):
            pass  # a bare string, e.g. --dataset=topics
        _set(_k, _v, _arg)
        if os.environ.get('RANK', '0') == '0':
            print(f"Overriding: {_k} = {globals()[_k]!r}")
