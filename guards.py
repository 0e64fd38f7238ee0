"""The seatbelts: what guards a run and teaches nothing about looped models (skip it at first).
Bad input is an InputError that names the problem and the fix, printed as one line, 'error: ...'."""
import os, re, ast, sys, glob, math, time, fcntl, shlex, atexit, shutil, signal, traceback
from contextlib import contextmanager, suppress
from difflib import get_close_matches

script_keys = {}  # the running script's keys and defaults (configurator.py sets them)
DTYPES = "x in ('', 'float32', 'bfloat16')"  # every script's --dtype
PATHS = ('path', 'paths', 'new file', 'new folder')  # the domains that are not a rule on x
# a rule that reads as Python says itself in words after '  # ' (an error message shows the words)
NAME = "'/' not in x and x not in ('.', '..')  # the name of a folder in data/, not a path"
COUNTS = 'all(type(k) is int and k >= 1 for k in x)  # a tuple of whole numbers, each at least 1'
SEEDS = ('len(x) >= 1 and len(set(x)) == len(x) and all(type(s) is int for s in x)'
         '  # a tuple of whole numbers, each once')
RUN_ONLY = ['init_from', 'out_dir', 'device', 'backend', 'compile', 'eval_only', 'overwrite']

# the model's keys (GPTConfig's fields): each one's valid values (x: its value), the rules across
# them in words; train.py checks them before GPTConfig checks its own
MODEL_KEYS = {'block_size vocab_size n_embd n_head phantom_steps': 'x >= 1',
              'n_prelude n_coda': 'x >= 0', 'alpha_init': '0 < x < 1', 'dropout': '0 <= x < 1',
              'loops supervise': COUNTS,
              'halt_penalty exit_beta': 'x >= 0', 'phantom act exit_gate bias': 'any'}
MODEL_RULES = [
    ('n_embd % n_head == 0', "n_embd must be a multiple of n_head: change one of them"),
    ('all(d <= sum(loops) for d in supervise)',
     "a supervised depth is past the last iteration (the sum of loops): lower --supervise or "
     "raise --loops"),
    ('list(supervise) == sorted(set(supervise))',
     "supervise lists each depth once, in increasing order, e.g. --supervise=(1,2,4)"),
    ('not (act and phantom)', "act picks each token's depth, phantom a fixed one: drop one"),
    ('not (act and supervise)', "act picks each token's depth: drop --supervise with --act"),
    ('not exit_gate or len(loops) == 1 and any(d < sum(loops) for d in supervise)',
     "exit_gate needs one tied segment and a supervised depth before its last, e.g. "
     "--loops=(12,) --supervise=(1,2,4,8)")]

TRAIN_RULES = [
    ('not decay_lr or lr_decay_iters > warmup_iters',
     "the learning rate decays after its warmup: raise --lr_decay_iters past --warmup_iters"),
    ('not decay_lr or min_lr <= learning_rate',
     "min_lr is where the learning rate decays to: give a --min_lr below --learning_rate"),
    ('exit_gate or gate_detached[0] >= gate_detached[1]',
     "gate_detached does nothing without exit_gate: add --exit_gate=True, or drop it"),
    ('not phantom or phantom_steps <= min(loops)',
     "phantom backprops through the last phantom_steps of each segment: give at most the "
     "fewest --loops"),
    # a key set (changed from its default) that acts only with another says so
    *[(f"'{key}' not in changed or {on}", f"does nothing without {on}: add --{on}=True, or drop "
       f"--{key}") for on, key in (('phantom', 'phantom_steps'), ('act', 'halt_penalty'),
                                   ('exit_gate', 'exit_beta'))]]

# Each script's keys: {script: (each key's valid values, the rules across keys in words)}. x is
# the key's value; configurator.py checks them before any work (test_domains tests them all)
KEYS = {
    'train.py': (
        {**MODEL_KEYS, 'out_dir': 'new folder', 'init_from': 'path',
         'dataset': f"x != '' and {NAME}",
         'eval_interval log_interval eval_iters gradient_accumulation_steps batch_size': 'x >= 1',
         'max_iters warmup_iters lr_decay_iters min_lr weight_decay grad_clip': 'x >= 0',
         'learning_rate': 'x > 0',
         'beta1 beta2': '0 <= x < 1', 'seed': '0 <= x < 2**64',
         'gate_detached': 'len(x) == 2 and all(type(i) is int and i >= 0 for i in x)'
                          '  # two whole numbers, each at least 0',
         'dtype': DTYPES, 'backend': "x in ('', 'nccl', 'gloo')",
         'eval_only always_save_checkpoint sft_pad decay_lr compile overwrite device': 'any'},
        MODEL_RULES + TRAIN_RULES),
    'sample.py': (
        {'max_new_tokens num_samples': 'x >= 1', 'temperature top_k': 'x >= 0',
         'top_p': '0 < x <= 1', 'seed': '0 <= x < 2**64',
         'repetition_penalty': '0.01 <= x <= 100',  # (beyond: float32 logits overflow)
         'n_loops': 'x is None or type(x) is int and x >= 1'
                    ' or type(x) is tuple and all(type(k) is int and k >= 1 for k in x)'
                    '  # None, a whole number at least 1, or a tuple of them (one a segment)',
         'out_dir': 'paths', 'dtype': DTYPES, 'start exit_at show_depth device': 'any'},
        []),
    'eval.py': (
        {'batch_size eval_iters max_docs': 'x >= 1',
         'thresholds': 'all(type(t) in (int, float) and t >= 0 for t in x)'
                       '  # a tuple of numbers, each at least 0',
         'exit_kind': "x in ('', 'maxprob', 'resid')",
         'out_dir': 'paths', 'html': 'new file', 'dataset': NAME, 'dtype': DTYPES,
         'device': 'any'},
        [("exit_kind == 'resid' or all(t <= 1 for t in thresholds)",
          "a maxprob threshold is a probability: give --thresholds at most 1")]),
    'prepare.py': (
        {'dataset': "x in ('topics', 'shakespeare', 'fineweb', 'sft')",
         'tokenizer': "x in ('gpt2', 'byte')", 'eval_docs shards': 'x >= 1',
         'block_size': 'x >= 2', 'base_url hf_url': "x.startswith(('http://', 'https://'))"
                                                  "  # a URL, http:// or https://",
         'mirror': 'path', 'data_root': 'new folder', 'seed': 'any'},
        [("dataset != 'fineweb' or tokenizer == 'gpt2'",
          "fineweb's shards are GPT-2 tokens: use --tokenizer=gpt2")]),
    'bench.py': (
        {'batch_size block_size n_embd n_head k repeats': 'x >= 1', 'gen_tokens': 'x >= 2',
         'n_prelude n_coda': 'x >= 0', 'vocab_size': 'x >= 257', 'peak_flops': 'x >= 0',
         'phantom_ks gen_loops dtype_widths': COUNTS,
         'init_from': 'paths', 'prompt': "x != ''", 'dtype': DTYPES,
         'exit_at estimate device compile seed': 'any'},
        [('all(w % n_head == 0 for w in dtype_widths)',
          "each of dtype_widths must be a multiple of n_head"),
         ('n_embd % n_head == 0', "n_embd must be a multiple of n_head: change one of them")]),
    'frontier.py': (
        {'eval_iters batch_size jobs': 'x >= 1', 'results runs': 'new folder',
         'seeds': SEEDS, 'models train_args from_runs device': 'any'},
        []),
    'room.py': ({'n_rows train_rows train_seed batch_size': 'x >= 1', 'results': 'new folder',
                 'runs data': 'path', 'seeds': SEEDS, 'models': 'any'}, []),
}

class InputError(ValueError):
    """Bad input, raised on purpose. Any other exception is a bug, and keeps its traceback."""

def excepthook(kind, err, tb, _default=sys.excepthook):  # every script's one entry handler
    if issubclass(kind, BrokenPipeError):  # stdout closed (| head): end quietly, as head expects
        return os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # (the exit's flush goes nowhere)
    if issubclass(kind, KeyboardInterrupt):  # Ctrl-C: one line; python then exits as SIGINT (130)
        return print("stopped (Ctrl-C)", file=sys.stderr)
    where = os.path.basename(traceback.extract_tb(tb)[-1].filename) if tb else ''
    if kind.__name__ == 'OutOfMemoryError' or "can't allocate memory" in str(err):
        err = "out of memory: " + ('lower --batch_size' if 'batch_size' in script_keys
                                   else 'use a smaller model')
    elif issubclass(kind, OSError) and err.filename is not None:  # a file the OS refused
        err = f"cannot use {err.filename}: {err.strerror}"
    elif not (issubclass(kind, InputError)  # (or a ValueError of model.py or decode.py: bad input)
              or kind is ValueError and where in ('model.py', 'decode.py')):
        return _default(kind, err, tb)
    if os.environ.get('RANK', '0') == '0':  # (torchrun: every rank meets the same input)
        print(f"error: {err}", file=sys.stderr)

def typed(key, value):  # key=value as typed in bash: --top_p=1.5, --out_dir='', '--loops=(2, 0)'
    return (f"--{key}={shlex.quote(value)}" if type(value) is str
            else shlex.quote(f"--{key}={value}"))

def check_arg(arg):  # configurator.py: one argument, before it is read
    if re.search('[\udc80-\udcff]', arg):  # how Python reads argv bytes that are not UTF-8
        raise InputError(f"{arg.partition('=')[0]} holds bytes that are not UTF-8 text: type it "
                         "again, or read it from a UTF-8 file (sample.py: --start=FILE:prompt.txt)")
    if arg.startswith('--') != ('=' in arg) and not os.path.exists(arg):  # --key, key=value
        raise InputError(f"'{arg}' is neither --key=value nor a config file: write "
                         f"--{arg.lstrip('-')}{'=VALUE' * ('=' not in arg)}")

def check_set(key, value, keys, where=''):  # configurator.py: a key the script has, of its type
    dash, default = '' if where else '--', keys.get(key)  # (where: the config file that sets it)
    if key not in keys:
        hint = ''.join(f"; did you mean {dash}{k}?" for k in get_close_matches(key, keys, n=1))
        raise InputError(f"unknown config key {dash}{key}{where}{hint}")
    if default is not None and type(value) is not type(default):  # (None: any type)
        raise InputError(f"{typed(key, value)}{where}: {key} is of type "
                         f"{type(default).__name__}, e.g. {typed(key, default)}")

def run_config(path, into):  # configurator.py: a config file (Python, as nanoGPT's) -> settings
    text = read_text_file(path, 'config file', ' (see config/ for the available ones)')
    if not path.endswith('.py'):  # (a JSON file is Python too, that sets nothing)
        raise InputError(f"config file {path} is not a .py file: a config file is Python that sets "
                         "keys, e.g. batch_size = 32 (see config/)")
    into.setdefault('include', lambda name: run_config(os.path.join(os.path.dirname(path), name),
                                                       into))  # include('v5.py'): its settings
    try:
        exec(compile(text, path, 'exec'), into)
    except (Exception, SystemExit) as e:  # the config file's own error: name the file and its line
        if isinstance(e, InputError):  # (an include()'s: it names its own file)
            raise
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
        line = e.lineno if isinstance(e, SyntaxError) else (lines or ['?'])[-1]
        why = ("calls sys.exit: a config file only sets keys" if isinstance(e, SystemExit)
               else f"{type(e).__name__}: {e}")
        raise InputError(f"config file '{path}', line {line}: {why}") from None
    imported = {a.asname or a.name.split('.')[0] for node in ast.walk(ast.parse(text))
                if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
    return {k: v for k, v in into.items() if k in script_keys or k.islower() and k[0] != '_'
            and k not in imported and type(v) in (int, float, bool, str, tuple)}  # (a setting:
    # a script's key, or what looks like one: an unknown one is refused with its closest key)

def holds(rule, values):
    try:  # (a value of the wrong kind, a text among numbers, breaks the rule too)
        return eval(rule, dict(values))
    except Exception:
        return False

def domains(table):  # {'a b': 'x >= 1'} -> {'a': 'x >= 1', 'b': 'x >= 1'}
    return {key: domain for keys, domain in table.items() for key in keys.split()}

def check_keys(table, rules, values, defaults):  # configurator.py: each key, then the rules
    table = domains(table)  # (a key without one is a bug of the script: a KeyError, below)
    for key, default in defaults.items():  # against its domain (a path: ~ and $VAR expanded)
        value, domain = values[key], table[key]
        floats = [v for v in (value if type(value) is tuple else [value]) if type(v) is float]
        if not all(abs(v) < 3e38 for v in floats):  # (1e999 reads as inf; nan passes no bound)
            raise InputError(f"{typed(key, value)}: need a number of float32 range, |x| < 3e38")
        if domain in PATHS and value != default:
            values[key] = check_path(key, value, domain, default)
        elif domain not in (*PATHS, 'any') and not holds(domain, {'x': value}):
            rule, _, words = domain.partition('  # ')  # (words: the rule's, else the rule)
            need = words or re.sub(r'\bx\b', key, rule)
            raise InputError(f"{typed(key, value)}: need {need}, e.g. {typed(key, default)}")
    if values.get('init_from', '') in ('', 'scratch'):  # (else train.py checks the run's settings)
        check_rules(rules, values, defaults)

def check_rules(rules, values, defaults):  # the first rule across keys that values break, in words
    values = {**values, 'changed': {k for k in defaults if values[k] != defaults[k]}}
    for rule, words in rules:  # (changed: the keys set to other than their defaults)
        if not holds(rule, values):
            keys = [k for k in dict.fromkeys(re.findall(r'[a-z_]+', rule)) if k in defaults]
            raise InputError(f"{' '.join(typed(k, values[k]) for k in keys)}: {words}")

def check_path(key, value, kind, default):  # -> the path (paths: a,b), ~ and $VAR expanded
    names = folders(value) if kind == 'paths' else [value]
    if '' in names:  # '' is a path only where it is the default (off)
        raise InputError(f"{typed(key, value)}: an empty name: need {key} != '', e.g. "
                         f"{typed(key, default)}")
    paths = [os.path.expanduser(os.path.expandvars(name)) for name in names]
    for path in paths:  # what is left is what bash would have expanded, or a typo
        if odd := re.search(r'\$\{?\w+|^~\w*|[\x00-\x1f]|^\s|\s$', path):
            raise InputError(f"{typed(key, value)}: {odd[0]!r} is left as typed: an unset $VAR, a "
                             "~user without a home, a space at an end or a control character")
        if kind in ('new folder', 'new file'):  # an output: created, to see, before any work
            check_output(path, key, kind == 'new folder')
    return ','.join(paths)

def check_output(path, key, folder=False):  # before any work: make what path will be, remove it
    new = None  # (what the OS will refuse, it refuses now)
    where = os.path.normpath(path if folder else os.path.dirname(path) or '.')
    while where and not os.path.lexists(where):  # new: the first folder it makes
        where, new = os.path.dirname(where), where
    probe = os.path.join(path, 'probe.tmp') if folder else path + '.tmp'  # (its writer's name)
    try:  # a file where a folder belongs, a read-only disk, a name too long, ...: the OS says
        if os.path.isdir(path) and not folder:  # (a file's rename onto a folder would fail)
            raise IsADirectoryError(21, 'Is a directory', path)
        os.makedirs(os.path.dirname(probe) or '.', exist_ok=True)
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT))
    except OSError as e:
        raise refused(path, e, f"give another --{key}") from None
    finally:  # nothing is left of the probe
        if os.path.isfile(probe):
            os.remove(probe)
        if new:
            shutil.rmtree(new, ignore_errors=True)

def folders(value):  # --out_dir='a,b' -> ['a', 'b'] (a folder named a,b: whole)
    return [value] if os.path.isdir(value) else value.split(',')

def refused(path, e, fix):  # the OS refused to write path (any errno) -> one line: why, the fix
    where = f" ({e.filename})" if e.filename not in (None, path) else ''
    return InputError(f"cannot write {path}: {e.strerror}{where}: {fix}")

def read_text_file(path, what, hint=''):  # -> the UTF-8 text of a file the user named (a pipe too)
    try:
        return open(path, encoding='utf-8').read()
    except (OSError, UnicodeDecodeError) as e:  # (not found, a folder, not UTF-8: one line)
        why = e.strerror if isinstance(e, OSError) else f"not UTF-8 text ({e}): save it as UTF-8"
        raise InputError(f"{what} {path}: {why}{hint}") from None

def read_prompt(start):  # sample.py's --start: the text, or FILE:path's (~ and $VAR expanded)
    if start.startswith('FILE:'):
        path = os.path.expanduser(os.path.expandvars(start[5:]))  # (bash leaves ~ after '=')
        start = read_text_file(path, 'prompt file', ' (--start=FILE:path reads path)')
    if not start:
        raise InputError("the prompt is empty: give some text, e.g. --start=FILE:prompt.txt")
    return start

def get_device(device=''):  # -> the --device ('' = cuda if there is a GPU, else cpu), checked
    import torch
    device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
    if device == 'cuda' and 'LOCAL_RANK' in os.environ:  # torchrun: each rank its own GPU, so
        device = f"cuda:{os.environ['LOCAL_RANK']}"  # that no rank opens a context on GPU 0
    try:
        torch.empty(1, device=device).cpu()  # (a device that holds no data, meta, fails here)
    except Exception:
        raise InputError(f"--device={device} is not usable on this machine: use --device=cpu")
    return device

def load_checkpoint(path, build, device='cpu', key='out_dir'):  # -> (build(ckpt), ckpt)
    import torch  # (build: GPT.from_checkpoint; key: the option that named the folder)
    if not os.path.exists(path):  # a typo? name the out_dir whose ckpt.pt is closest, or the newest
        found = sorted(glob.glob('*/ckpt.pt'), key=os.path.getmtime, reverse=True)
        near = get_close_matches(path, found, n=1, cutoff=0.8) or found[:1]
        hint = (f"; found {', '.join(found)}: add --{key}={os.path.dirname(near[0])}" if found
                else f": train one first, or set --{key}")
        raise InputError(f"no checkpoint at {path}{hint}")
    try:  # weights_only: a checkpoint is tensors and plain data, never code (which unpickling runs)
        if not os.path.isfile(path):  # (a folder; a FIFO would hang the read)
            raise ValueError("not a regular file")
        ckpt = torch.load(path, map_location=device, weights_only=True)
        model = build(ckpt)  # (another version's: a TypeError, KeyError or RuntimeError)
        ckpt['meta']['tokenizer'], ckpt['config']['dataset']  # (the scripts read them too)
    except Exception as e:  # not a checkpoint, cut short, unsafe, another version's: one line
        why = ('unsafe: it holds objects other than tensors and plain data' if 'Unsupported global'
               in str(e) else f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")
        raise InputError(f"{path} is not a checkpoint of this version of nanoloop ({why}): give "
                         f"the --{key} of a run train.py saved") from None
    fresh, weights = digest(ckpt['model']), ckpt['model'].values()  # damaged in place? (train.py
    if ckpt.get('digest', fresh) != fresh or not all(  # saves a checksum beside the weights)
            t.isfinite().all() for t in weights if t.is_floating_point()):
        raise InputError(f"{path} is damaged: its weights differ from the checksum saved with them "
                         "or are not finite: use a copy of it, or train it again")
    return model.to(device), ckpt

def parse_exit(s, config=None, model='the model'):  # 'maxprob:0.9' -> ('maxprob', 0.9)
    kind, _, text = s.partition(':')
    t = -1.0  # a threshold >= 0, as eval.py's: resid:-1 or nan would never exit, without a word
    with suppress(ValueError):
        t = float(text) if kind in ('maxprob', 'resid') else t
    if not (0 <= t <= 1 or kind == 'resid' and t >= 0):  # (maxprob:1.5 would never exit)
        raise InputError(f"--exit_at={s}: write maxprob:T (0 <= T <= 1) or resid:T (T >= 0), "
                         "e.g. --exit_at=maxprob:0.9")
    check_exits(f"--exit_at={s}", config, model)  # (with a config: one that model has)
    return kind, t

def check_exits(given, c, model='the model'):  # an exit option (given) for a model (c: its config)
    if c and not c.exit_kinds():  # (post-hoc exits need a tied loop, and no ACT gate that picks)
        lacks = "an ACT gate that picks each token's depth" if c.act else "no tied loop"
        raise InputError(f"{given}: {model} has {lacks}; drop it")

def check_start(ckpt, meta, data_dir, T):  # a trained model (ckpt) against the data it meets
    c, data = ckpt['model_args'], f"tokenizer {meta['tokenizer']}, vocab_size {meta['vocab_size']}"
    if (trained := f"tokenizer {ckpt['meta']['tokenizer']}, vocab_size {c['vocab_size']}") != data:
        raise InputError(f"{data_dir}/meta.json: {data}, but the model was trained on --dataset="
                         f"{ckpt['config']['dataset']} ({trained}): prepare the data with the "
                         "model's tokenizer")
    if T > c['block_size']:
        raise InputError(f"--block_size={T} is larger than the model's {c['block_size']}: lower it")

def check_blocks(path, n, T):  # a token stream (path) of n tokens, cut into rows of T + 1
    if n <= T:
        raise InputError(f"{path} has {n:,} tokens, too few for block_size {T}: lower --block_size,"
                         " or prepare more data")

def check_eval(model, ckpt, meta, n_val, data_dir, T, out_dir, html, exit_kind, thresholds):
    # eval.py: one model's settings against it and its data
    given = f"--exit_kind={exit_kind}" if exit_kind else typed('thresholds', thresholds)
    check_exits(given, (exit_kind or thresholds) and model.config, f"the model in {out_dir}")
    check_start(ckpt, meta, data_dir, T)
    check_blocks(f"{data_dir}/val.bin", n_val, T)
    if html:  # (several out_dirs: a map in each, by this name)
        check_output(html, 'html')

def resume_command():  # this very command, resuming: it runs as typed
    args = [a for a in sys.argv if not a.startswith(('--init_from=', '--overwrite='))]
    return shlex.join(['python', *args, '--init_from=resume'])

def given_keys(config, defaults):  # the keys this command sets (typed, or changed)
    typed_keys = {arg[2:].partition('=')[0] for arg in sys.argv[1:] if arg.startswith('--')}
    return {k for k in config if config[k] != defaults[k]} | typed_keys

def check_kept(given, run, config, fixed):  # a given key the run fixes must agree with it
    doing, where = (('resuming', config['out_dir']) if config['init_from'] == 'resume'
                    else ('fine-tuning', config['init_from']))
    files = ' '.join(a for a in sys.argv[1:] if not a.startswith('--'))  # the config files
    for key in sorted(k for k in given & set(run) & fixed if config[k] != run[k]):
        said = (typed(key, config[key]) if f'--{key}=' in str(sys.argv)  # (as it was set)
                else f"{key} = {config[key]!r} in {files}")
        raise InputError(f"{said}: the run in {where} has {typed(key, run[key])}, which {doing} "
                         "cannot change: drop it, or train a new --out_dir")

def check_run(config, defaults):  # train.py's settings, merged with a run's -> the device
    check_rules(KEYS['train.py'][1], config, defaults)
    world, steps = int(os.environ.get('WORLD_SIZE', 1)), config['gradient_accumulation_steps']
    if steps % world:
        raise InputError(f"--gradient_accumulation_steps={steps} counts the micro steps of all "
                         f"{world} processes: give a multiple of {world}")
    return get_device(config['device'])

def check_train_data(s, meta, data_dir, train_data, val_data, iter_num, ckpt):  # s: settings
    T, row = s['block_size'], meta['row']
    if row and T + 1 != row and os.environ.get('RANK', '0') == '0':  # SFT: the rows set it
        print(f"block_size = {row - 1}: {data_dir} holds SFT rows of {row} tokens")
    T = row - 1 if row else T
    if ckpt:  # resuming or fine-tuning: the trained model against this data
        check_start(ckpt, meta, data_dir, T)
    for name, data in (('train', train_data), ('val', val_data)) if not row else ():
        check_blocks(f"{data_dir}/{name}.bin", len(data), T)
    if (tokens := s['batch_size'] * T) > train_data.size:  # (a typo? it would fill the memory)
        raise InputError(f"--batch_size={s['batch_size']}: a batch of {tokens:,} tokens is more "
                         f"than {data_dir}/train.bin holds ({train_data.size:,}): lower it")
    path, tune = os.path.join(s['out_dir'], 'ckpt.pt'), s['init_from']
    if tune != 'resume' and os.path.exists(path) and not s['overwrite']:  # never by accident
        own = tune != 'scratch' and os.path.samefile(tune, s['out_dir'])  # (a fine-tune of it)
        fix = (f"--init_from={tune} fine-tunes it: write to another --out_dir" if own else
               f"resume it with  {resume_command()}  or start over on purpose with "
               "--overwrite=True (or another --out_dir)")
        raise InputError(f"{path} already holds a run: {fix}")
    if iter_num >= s['max_iters'] and not s['eval_only']:
        at = f"{path} is at iter {iter_num} and " if tune == 'resume' else ''
        raise InputError(f"nothing to train: {at}max_iters is {s['max_iters']}; raise --max_iters")

def check_loss(lossf, iter_num, last_loss, alphas, ckpt_path, s, given):  # s: settings
    if not math.isfinite(lossf):  # (the float settings this run gives: the likely cause)
        given = ' '.join(typed(k, s[k]) for k in sorted(given) if type(s[k]) is float)
        raise InputError(f"loss is {lossf} at iter {iter_num + 1} (last good loss {last_loss}); "
                         f"alphas {alphas}. Lower --learning_rate or --alpha_init"
                         f"{f' (this run sets {given})' * bool(given)}; {ckpt_path} was not "
                         "overwritten.")

def lock(out_dir):  # one run at a time in out_dir: a lock that the system drops if a run dies
    os.makedirs(out_dir, exist_ok=True)
    f = open(os.path.join(out_dir, 'train.lock'), 'w')
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise InputError(f"another training run is writing to {out_dir}: wait for it to finish, "
                         "or pick another --out_dir") from None
    atexit.register(os.remove, f.name)  # the run ends: its lock file goes
    return f

def ran_on():  # -> where a run runs: commit ('+': the tree differs), torch, CPU, threads
    import platform, subprocess, torch
    git = subprocess.Popen(['git', '-C', os.path.dirname(os.path.abspath(__file__)), 'describe',
                            '--always', '--dirty=+', '--exclude=*'], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True).communicate()[0]
    info = open('/proc/cpuinfo').read() if os.path.exists('/proc/cpuinfo') else ''  # (Linux)
    cpu = re.findall(r'^model name\s*: (.*)', info, re.M) or [platform.machine()]
    return dict(commit=git.strip() or 'unknown', torch=torch.__version__, cpu=cpu[0],
                threads=torch.get_num_threads())

class Progress:  # a long loop says how far it is, every 5 s: progress(text) at each turn
    def __init__(self, file=None):  # (eval.py: stderr, its stdout is the report)
        self.t0, self.file = time.time(), file

    def __call__(self, text):
        if time.time() - self.t0 > 5:
            print(text, file=self.file, flush=True)
            self.t0 = time.time()

class Stop:  # Ctrl-C, SIGTERM, SIGHUP or a failed stdout ask to stop: finish the step, save, exit
    def __init__(self, ckpt_path, master):  # (asked again: stop at once)
        self.signals, self.ckpt_path, self.master, self.out = [], ckpt_path, master, sys.stdout
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) != signal.SIG_IGN or signum != signal.SIGHUP:  # (nohup)
                signal.signal(signum, self.request)
        sys.stdout = self  # what the run prints goes through write, below

    def write(self, text):  # a stdout that fails (| head closed, a terminal gone) asks to stop
        try:
            self.out.write(text)
            self.out.flush()  # (at once: a closed pipe is met now, not when the run ends)
        except OSError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # (what is left to print goes nowhere)
            if not self.signals:  # (Ctrl-C in `| tee` ends tee too: that is not a second ask)
                self.request(signal.SIGPIPE, None)

    def __getattr__(self, name):  # the rest of stdout's: flush, fileno, ...
        return getattr(self.out, name)

    def request(self, signum, frame):
        self.signals.append(signum)
        if len(self.signals) > 1:
            raise SystemExit(f"stopped at once; {self.ckpt_path} holds the last saved checkpoint")
        if self.master:  # (to a terminal that is gone: write, above, sends it nowhere)
            print(f"\nstopping: finishing this step, then saving {self.ckpt_path}; resume "
                  f"with  {resume_command()}  (again: stop at once)")

    def asked(self, ddp, device):  # by any process? (all must agree, or the others would hang)
        import torch
        asked = torch.tensor(float(len(self.signals)), device=device)
        if ddp:
            torch.distributed.all_reduce(asked)
        return asked.item() > 0

    def exit(self):  # a signal: exit as a shell reports it (130 Ctrl-C, 143 SIGTERM, 141 a pipe)
        if self.signals:
            sys.exit(128 + self.signals[0])

@contextmanager
def saving(path, what=''):  # every file a script writes: path.tmp beside it to write, and once
    tmp = path + '.tmp'  # it is whole: fsynced, renamed to path. Else path is left as it was
    try:
        os.makedirs(os.path.dirname(path) or '.', exist_ok=True)  # (its folder, if new)
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        os.fsync(fd)  # (on disk before the rename: a power loss leaves the old file or the new)
        os.close(fd)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:  # any refusal of the OS; torch's writer wraps it
        cause = e if isinstance(e, OSError) else e.__context__
        if isinstance(cause, (SystemExit, KeyboardInterrupt)):  # (a second stop signal)
            raise cause from None
        if not isinstance(cause, OSError):
            raise
        kept = 'it is left as it was: ' * os.path.exists(path)
        raise refused(f"{path}{what and ' '}{what}", cause, f"{kept}free some space, or write "
                      "elsewhere") from None
    finally:  # (no partial file is left behind)
        with suppress(OSError):
            os.remove(tmp)

@contextmanager
def written(path, mode='w'):  # -> saving's file, open to write
    with saving(path) as tmp, open(tmp, mode, encoding=None if 'b' in mode else 'utf-8') as f:
        yield f

def check_prepared(out_dir, train, held, sft_block):  # prepare.py: eval.py needs held-out docs
    if not (held and train):
        raise InputError(f"no {'training' if held else 'held-out'} documents left for {out_dir}"
                         + f": raise --block_size={sft_block}" * bool(sft_block))

def digest(state):  # a checksum of a checkpoint's weights: saved beside them, checked on load
    import hashlib, torch
    h = hashlib.sha256()
    for name, t in sorted(state.items()):
        h.update(name.encode())
        h.update(t.detach().cpu().reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()

def save(ckpt, path, iter_num):  # torch.save, atomically (saving), with its checksum
    import torch  # (to a file: torch's writer then keeps the OSError it met)
    with saving(path, f"(at iter {iter_num})") as tmp, open(tmp, 'wb') as f:
        torch.save({**ckpt, 'digest': digest(ckpt['model'])}, f)

sys.excepthook = excepthook  # imported first by every script: its one entry handler
