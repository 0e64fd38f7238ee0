"""
Config overrides, exec'd (never imported) by every script, as in nanoGPT:
$ python train.py config/smoke.py --batch_size=32 --loops="(10,10)"
A config file sets globals; --key=value then overrides one. Every key must already be a global of
the script, of the same type, so a typo or a wrong type fails at once with a one-line message.
Then each rule in the script's _valid list (like 'batch_size >= 1') must hold.
"""
import os
import re
import ast as _ast
import builtins
import sys
import traceback
from difflib import get_close_matches

def _excepthook(kind, err, tb, _default=sys.excepthook):
    """nanoloop's error policy, all of it. Bad input is a ValueError or FileNotFoundError raised on
    purpose by a `raise` line of nanoloop's own files, naming the problem and the fix: it prints as
    one line, 'error: <message>'. Anything else, even from inside torch or numpy, is a bug until
    shown otherwise: it keeps its traceback. So where bad input makes a library fail (a file that is
    not JSON, a full disk), the code catches that error and raises its own, naming the fix."""
    last = traceback.extract_tb(tb)[-1] if tb else None
    ours = last and os.path.dirname(os.path.abspath(last.filename)) == _HERE
    if issubclass(kind, (ValueError, FileNotFoundError)) and ours and last.line.startswith('raise'):
        print(f"error: {err}", file=sys.stderr)
    else:
        _default(kind, err, tb)
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.excepthook = _excepthook
_overridden = set()  # the keys the user set (resume keeps the run's own value of any other key)

def _set(key, val, where):
    if key not in globals() or key.startswith('_'):
        near = get_close_matches(key, [k for k in globals() if not k.startswith('_')], n=1)
        hint = f"; did you mean '{near[0]}'?" if near else ""
        sys.exit(f"error: unknown config key '{key}' ({where}){hint}")
    old = globals()[key]
    if isinstance(old, bool) and str(val).lower() in ('true', 'false'):
        val = str(val).lower() == 'true'
    elif isinstance(old, float) and type(val) is int:
        val = float(val)
    elif isinstance(old, tuple) and type(val) is int:
        val = (val,)  # --loops=4 means one segment of 4
    if old is not None and type(val) is not type(old):
        sys.exit(f"error: {key} must be of type {type(old).__name__} (like {old!r}), "
                 f"got {val!r} ({where})")
    globals()[key] = val
    _overridden.add(key)

def _run_config(path, into):
    """exec a config file; inside it, include('v5.py') first runs a config of the same folder."""
    if not os.path.isfile(path):
        what = "is a folder, not a file" if os.path.isdir(path) else "not found"
        sys.exit(f"error: config file '{path}' {what} (see config/ for the available ones)")
    include = lambda name: _run_config(os.path.join(os.path.dirname(path), name), into)
    try:
        code = builtins.compile(open(path).read(), path, 'exec')  # (train.py has a key `compile`)
        exec(code, {'include': include}, into)
    except Exception as e:  # the config file's own error: name the file and its line
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
        line = e.lineno if isinstance(e, SyntaxError) else lines[-1] if lines else '?'
        sys.exit(f"error: config file '{path}', line {line}: {type(e).__name__}: {e}")

if {'-h', '--help'} & set(sys.argv[1:]):  # the script's docstring, then its keys and defaults
    print(_ast.get_docstring(_ast.parse(open(__file__).read())))  # (its __doc__ is now ours)
    print("\nkeys (--key=value), with their defaults:")
    _simple = (int, float, bool, str, tuple, type(None))  # keys, not modules, functions, ...
    for _key, _val in list(globals().items()):
        if _key.islower() and not _key.startswith('_') and type(_val) in _simple:
            print(f"  {_key} = {_val!r}")
    sys.exit(0)

for _arg in sys.argv[1:]:
    if re.search('[\udc80-\udcff]', _arg):  # how Python reads argv bytes that are not UTF-8
        sys.exit(f"error: {_arg.partition('=')[0]} holds bytes that are not UTF-8 text: type it "
                 "again, or read it from a UTF-8 file (sample.py: --start=FILE:prompt.txt)")
    if _arg.startswith('--'):
        _key, _eq, _val = _arg[2:].partition('=')
        if not _eq:
            sys.exit(f"error: '{_arg}' needs a value: write {_arg}=VALUE")
        try:
            _val = _ast.literal_eval(_val)
        except (SyntaxError, ValueError):
            pass  # a bare string, e.g. --dataset=topics
        _updates = {_key: _val}
    else:  # a config file
        _updates = {}
        _run_config(_arg, _updates)
    for _key, _val in _updates.items():
        if not _key.startswith('_') and not isinstance(_val, type(sys)):  # skip imports
            _set(_key, _val, _arg)
    if os.environ.get('RANK', '0') == '0':  # under torchrun only rank 0 talks
        print(f"Overriding: {_key} = {globals()[_key]!r}" if _arg.startswith('--') else
              f"Overriding config with {_arg}")
for _rule in globals().get('_valid', []):  # a rule that does not hold: one line naming its keys
    if not eval(_rule, globals()):
        _keys = dict.fromkeys(k for k in re.findall(r'[a-z_]+', _rule) if k in globals())
        sys.exit(f"error: {', '.join(f'{k}={globals()[k]!r}' for k in _keys)}: need {_rule}")
if os.environ.get('NANOLOOP_ARGS_ONLY'):  # tests: a command's arguments are fine; run nothing
    sys.exit(0)
if 'cuda' in str(globals().get('device', '')) and not torch.cuda.is_available():
    sys.exit(f"error: device={device!r}, but this machine has no CUDA GPU: use --device=cpu")
if globals().get('device') and 'cuda' not in device:  # mps, a typo, ...: before anything is read
    try:
        torch.empty(1, device=device)
    except Exception:
        sys.exit(f"error: device={device!r} is not usable on this machine: use --device=cpu")
