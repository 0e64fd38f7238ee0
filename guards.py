"""The seatbelts: what guards a run and teaches nothing about looped models (skip it at first).
Bad input is an InputError that names the problem and the fix, printed as one line, 'error: ...'."""
import os, re, sys, glob, json, time, fcntl, shlex, atexit, shutil, signal, pathlib, traceback
from contextlib import contextmanager, suppress
from difflib import get_close_matches
import numpy as np

script_keys = {}  # the running script's keys and defaults (configurator.py sets them)
DTYPES = "x in ('', 'float32', 'bfloat16')"  # every script's --dtype
EOT = {'byte': 256, 'gpt2': 50256}  # prepare.py's tokenizers: their EOT ids (vocab_size: + 1)
PATHS = ('path', 'paths', 'new file', 'new folder', 'name')  # the domains that are not a rule on x
RUN_ONLY = ['init_from', 'out_dir', 'device', 'backend', 'compile', 'eval_only', 'overwrite']

# the model's keys (GPTConfig's fields): each one's valid values (x: its value), the rules across
# them in words; train.py checks them before GPTConfig checks its own
MODEL_KEYS = {'block_size vocab_size n_embd n_head phantom_steps': 'x >= 1',
              'n_prelude n_coda': 'x >= 0', 'alpha_init': '0 < x < 1', 'dropout': '0 <= x < 1',
              'loops supervise': 'all(type(k) is int and k >= 1 for k in x)',
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
    *[(f"{on} or '{key}' not in changed", f"does nothing without {on}: add --{on}=True, or drop "
       f"--{key}") for on, key in (('phantom', 'phantom_steps'), ('act', 'halt_penalty'),
                                   ('exit_gate', 'exit_beta'))],
    ("grad_noise or 'noise_iters' not in changed",
     "does nothing without grad_noise: give --grad_noise=r, or drop --noise_iters")]

class InputError(ValueError):
    """Bad input, raised on purpose. Any other exception is a bug, and keeps its traceback."""

def excepthook(kind, err, tb, _default=sys.excepthook):  # (torch's OOM by name: no torch import)
    memory = kind.__name__ == 'OutOfMemoryError' or "can't allocate memory" in str(err)
    last = traceback.extract_tb(tb)[-1].filename if tb else ''  # where it was raised
    if not (issubclass(kind, InputError) or memory
            or kind is ValueError and last.endswith(os.sep + 'model.py')):
        _default(kind, err, tb)
    elif os.environ.get('RANK', '0') == '0':  # (torchrun: every rank meets the same input)
        size = re.search(r'[Tt]ried to allocate [\d.]+ \w+', str(err))
        fix = 'lower --batch_size' if 'batch_size' in script_keys else 'use a smaller model'
        print(f"error: {f'out of memory ({size and size[0]}): {fix}' if memory else err}",
              file=sys.stderr)

def typed(key, value):  # key=value as typed in bash: --top_p=1.5, --out_dir='', '--loops=(2, 0)'
    return (f"--{key}={shlex.quote(value)}" if type(value) is str
            else shlex.quote(f"--{key}={value}"))

def check_arg(arg):  # configurator.py: one argument, before it is read
    if re.search('[\udc80-\udcff]', arg):  # how Python reads argv bytes that are not UTF-8
        raise InputError(f"{arg.partition('=')[0]} holds bytes that are not UTF-8 text: type it "
                         "again, or read it from a UTF-8 file (sample.py: --start=FILE:prompt.txt)")
    if arg.startswith('--') and '=' not in arg:
        raise InputError(f"'{arg}' needs a value: write {arg}=VALUE")
    if not arg.startswith('--') and '=' in arg and not os.path.exists(arg):  # batch_size=3
        raise InputError(f"'{arg}' is neither --key=value nor a config file: write "
                         f"--{arg.lstrip('-')}")

def check_known(key, keys, where=''):  # configurator.py: a key the script has (where: a config)
    if key not in keys:
        dash = '' if where else '--'
        hint = ''.join(f"; did you mean {dash}{k}?" for k in get_close_matches(key, keys, n=1))
        raise InputError(f"unknown config key {dash}{key}{where}{hint}")

def check_type(key, value, old, where=''):  # configurator.py: a key keeps its default's type
    if old is not None and type(value) is not type(old):
        raise InputError(f"{typed(key, value)}{where}: {key} is of type {type(old).__name__}, "
                         f"e.g. {typed(key, old)}")

def run_config(path, into):  # configurator.py: a config file's settings; include('v5.py') in it
    text = read_text_file(path, 'config file', ' (see config/ for the available ones)')
    include = lambda name: run_config(os.path.join(os.path.dirname(path), name), into)
    try:
        exec(compile(text, path, 'exec'), {'include': include}, into)
        return into
    except InputError:  # an include()'s
        raise
    except Exception as e:  # the config file's own error: name the file and its line
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
        line = e.lineno if isinstance(e, SyntaxError) else (lines or ['?'])[-1]
        raise InputError(f"config file '{path}', line {line}: {type(e).__name__}: {e}") from None

def holds(rule, values):
    try:  # (a value of the wrong kind, a text among numbers, breaks the rule too)
        return eval(rule, dict(values))
    except Exception:
        return False

def check_rules(rules, values, example):  # bad input: the first rule that values break, in words
    values = {**values, 'changed': {k for k in example if values[k] != example[k]}}
    for rule, words in rules:  # (changed: the keys set to other than their defaults)
        if not holds(rule, values):
            keys = [k for k in dict.fromkeys(re.findall(r'[a-z_]+', rule)) if k in example]
            idle = re.fullmatch(r"(\w+) or '(\w+)' not in changed", rule)  # acts only with another
            said = typed(idle[2], values[idle[2]]) if idle else ' '.join(
                typed(k, values[k]) for k in keys)
            raise InputError(f"{said}{' ' if idle else ': '}{words}")

def domains(table):  # {'a b': 'x >= 1'} -> {'a': 'x >= 1', 'b': 'x >= 1'}
    return {key: domain for keys, domain in table.items() for key in keys.split()}

def check_keys(table, rules, values, defaults):  # configurator.py: each key, then the rules
    table = domains(table)
    if undeclared := [k for k in defaults if k not in table]:  # a bug of the script, not input
        raise RuntimeError(f"no domain declared for {', '.join(undeclared)}: add it to _domain")
    for key, default in defaults.items():  # against its domain (a path: ~ and $VAR expanded)
        value, domain = values[key], table[key]
        finite = all(abs(v) < 3e38 for v in (value if type(value) is tuple else (value,))
                     if type(v) is float)  # (1e999 reads as inf, nan passes no bound: float32's)
        rule = re.sub(r'\bx\b', key, domain) if finite else 'a number of float32 range, |x| < 3e38'
        if not finite or domain not in (*PATHS, 'any') and not holds(domain, {'x': value}):
            example = f", e.g. {typed(key, default)}" if holds(domain, {'x': default}) else ''
            raise InputError(f"{typed(key, value)}: need {rule}{example}")
        if domain in PATHS and value != default:
            values[key] = check_path(key, value, domain, default)
    if values.get('init_from', '') in ('', 'scratch'):  # (else train.py checks the run's settings)
        check_rules(rules, values, defaults)

def check_path(key, value, kind, default):  # -> the path, ~ and $VAR expanded, or bad input
    if value == '':  # '' is a path only where it is the default (off)
        raise InputError(f"{typed(key, value)}: need {key} != '', e.g. {typed(key, default)}")
    names = value.split(',') if kind == 'paths' and not os.path.isdir(value) else [value]
    paths = [os.path.expanduser(os.path.expandvars(name)) for name in names]
    for path in paths:  # what is left is what bash would have expanded, or a typo
        if odd := re.search(r'\$\{?\w+|^~\w*|[\x00-\x1f]|^\s|\s$', path):
            why = (f"{odd[0]} is not set" if odd[0][0] == '$' else f"{odd[0]} is no home folder"
                   if odd[0][0] == '~' else "a space at one end, or a control character")
            raise InputError(f"{typed(key, value)}: {why}: type the path as it is")
        if kind == 'name' and (os.sep in path or path in ('.', '..')):
            raise InputError(f"{typed(key, value)}: {key} is a folder name in data/, not a path, "
                             f"e.g. {typed(key, default)}")
        clash = {'new folder': (os.path.isfile, 'file'), 'new file': (os.path.isdir, 'folder')}
        if kind in clash and clash[kind][0](path):  # (an output where a file is, or a folder)
            raise InputError(f"cannot write {path}: it is a {clash[kind][1]}: give another --{key}")
    return ','.join(paths)

def check_n_loops(model, n_loops):  # -> model.depths(n_loops), or bad input that names the fix
    try:
        return model.depths(n_loops)
    except ValueError:
        n = len(model.segments)
        why = (f"{n} tied segment{'s' * (n > 1)}: give one depth >= 1 for all, e.g. --n_loops=4"
               + ", or one each" * (n > 1) if n else "no tied loop: drop --n_loops")
        raise InputError(f"{typed('n_loops', n_loops)}: the model has {why}") from None

def get_device(device=''):  # -> the --device ('' = cuda if there is a GPU, else cpu), checked
    import torch
    device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
    if device == 'cuda' and 'LOCAL_RANK' in os.environ:  # torchrun: each rank its own GPU, so
        device = f"cuda:{os.environ['LOCAL_RANK']}"  # that no rank opens a context on GPU 0
    try:
        torch.empty(1, device=device)
    except Exception:
        why = ' (no CUDA GPU here)' if 'cuda' in device and not torch.cuda.is_available() else ''
        raise InputError(f"--device={device} is not usable on this machine{why}: use --device=cpu")
    return device

def autocast_dtype(device, dtype='', decode=False, trained=''):  # -> (dtype, autocast, why)
    import torch
    device_type = 'cuda' if 'cuda' in device else 'cpu'
    why = f"--dtype={dtype}"  # '' is the dtype the model was trained with, else the fastest
    if not dtype and trained:
        dtype, why = trained, "the dtype the model was trained with"
    elif not dtype and device_type == 'cuda':
        dtype, why = 'bfloat16', "the default on CUDA"
    elif not dtype and decode:
        dtype, why = 'float32', "decoding on a CPU, a token at a time (bf16 autocast is slower)"
    elif not dtype:
        has = (['AMX'] * torch.cpu._is_amx_tile_supported()
               + ['avx512_bf16'] * torch.cpu._is_avx512_bf16_supported())
        dtype = 'bfloat16' if has else 'float32'
        why = f"this CPU has {' and '.join(has) or 'no bf16'} instructions"
    ctx = torch.autocast(device_type, torch.bfloat16, enabled=dtype == 'bfloat16')
    return dtype, ctx, f"{'bfloat16 autocast' if dtype == 'bfloat16' else 'float32'}: {why}"

def load_checkpoint(path, device='cpu', key='out_dir'):  # -> (model, ckpt); key: the folder's key
    import torch
    from model import GPT, GPTConfig
    try:  # weights_only: a checkpoint is tensors and plain data, never code (which unpickling runs)
        ckpt = torch.load(path, map_location=device, weights_only=True)
        lacking = {'model', 'model_args', 'meta', 'config'} - set(ckpt)
        lacking |= {f"{k}['{i}']" for k, i in (('meta', 'tokenizer'), ('config', 'dataset'))
                    if k in ckpt and i not in ckpt[k]}  # (read beside the weights too)
    except FileNotFoundError:  # name the out_dir whose ckpt.pt is closest (a typo), or the newest
        found = sorted(glob.glob('*/ckpt.pt'), key=os.path.getmtime, reverse=True)
        near = get_close_matches(path, found, n=1, cutoff=0.8) or found[:1]
        hint = (f"; found {', '.join(found)}: add --{key}={os.path.dirname(near[0])}" if found
                else f": train one first, or set --{key}")
        raise InputError(f"no checkpoint at {path}{hint}") from None
    except NotADirectoryError:  # --out_dir=run/ckpt.pt: the checkpoint, not its folder
        given = os.path.dirname(path)
        raise InputError(f"--{key}={given} is a file: give the folder that holds ckpt.pt, e.g. "
                         f"--{key}={os.path.dirname(given) or '.'}") from None
    except Exception as e:  # weights_only refused code in it (unsafe), or it is no checkpoint
        why = ("is not a safe checkpoint: it holds objects other than tensors and plain data"
               if 'Unsupported global' in str(e) else "is truncated or not a nanoloop checkpoint")
        raise InputError(f"{path} {why}") from None
    if lacking:  # what the scripts read besides the weights
        raise InputError(f"{path} lacks {' and '.join(sorted(lacking))}: not saved by train.py")
    try:  # saved by another version of nanoloop? name the keys that differ (torch lists them)
        model = GPT(GPTConfig(**ckpt['model_args']))
        model.load_state_dict(ckpt['model'])
    except (TypeError, ValueError, RuntimeError) as e:
        raise InputError(f"{path} does not fit this version of nanoloop ({' '.join(str(e).split())}"
                         "): use the version that saved it, or train it again") from None
    return model.to(device), ckpt

def lacks_exits(c):  # -> '' where a model has post-hoc exits (model.exit_kinds), or what it lacks
    from model import exit_kinds
    lacks = "an ACT gate that picks each token's depth" if c.act else "no tied loop"
    return '' if exit_kinds(c) else lacks

def parse_exit(s, config=None):  # 'maxprob:0.9' -> ('maxprob', 0.9); with a config, one it has
    kind, _, text = s.partition(':')
    t = -1.0  # a threshold >= 0, as eval.py's: resid:-1 or nan would never exit, without a word
    with suppress(ValueError):
        t = float(text) if kind in ('maxprob', 'resid') else t
    if not (0 <= t <= 1 or kind == 'resid' and t >= 0):  # (maxprob:1.5 would never exit)
        raise InputError(f"--exit_at={s}: write maxprob:T (0 <= T <= 1) or resid:T (T >= 0), "
                         "e.g. --exit_at=maxprob:0.9")
    if config and (lacks := lacks_exits(config)):
        raise InputError(f"--exit_at={s}: the model has {lacks}; drop --exit_at")
    return kind, t

def check_output(path, key):  # before any work: can path be written? (missing folders: fine)
    where = os.path.abspath(path)
    while not os.path.exists(where):  # the first part of it that exists
        if os.path.islink(where):
            raise InputError(f"cannot write {path}: {where} is a link to {os.readlink(where)}, "
                             f"which does not exist: make it, or give another --{key}")
        where = os.path.dirname(where)
    folder = where if where != os.path.abspath(path) else os.path.dirname(where)
    for bad, why in ((os.path.isdir(path), f"{path} is a folder"),
                     (not os.path.isdir(folder), f"{folder} is a file"),
                     (not (os.access(folder, os.W_OK) and os.access(where, os.W_OK)),
                      f"{where} is read-only")):
        if bad:
            raise InputError(f"cannot write {path}: {why}: give another --{key}")

def folders(value, once=True):  # --out_dir='a,b' -> ['a', 'b']; none empty, each once
    if os.path.isdir(value):  # --out_dir=run-lr3e-3,bs16: never split where the user did not
        return [value]
    if '' in (names := value.split(',')) or once and len(set(names)) < len(names):
        why = 'an empty name' if '' in names else 'a folder named twice'
        raise InputError(f"--out_dir={value}: {why}; name folders comma-separated: --out_dir=a,b")
    return names

def read_text_file(path, what, hint=''):  # -> the UTF-8 text of a file the user named
    if not os.path.isfile(path):
        why = 'is a folder, not a file' if os.path.isdir(path) else 'not found'
        raise InputError(f"{what} {path} {why}{hint}")
    try:
        return open(path, encoding='utf-8').read()
    except UnicodeDecodeError as e:
        raise InputError(f"{what} {path} is not UTF-8 text ({e}): save it as UTF-8") from None

def read_prompt(start):  # sample.py's --start: the text, or FILE:path's (~ and $VAR expanded)
    if start.startswith('FILE:'):
        path = os.path.expanduser(os.path.expandvars(start[5:]))  # (bash leaves ~ after '=')
        start = read_text_file(path, 'prompt file', ' (--start=FILE:path reads path)')
    if not start:
        raise InputError("the prompt is empty: give some text, e.g. --start='\\n' "
                         "or --start=FILE:prompt.txt")
    return start

@contextmanager
def replaced(path):  # -> a folder to build in; done, it replaces path whole; else path stays
    new, old = (f"{path}.{what}.{os.getpid()}" for what in ('new', 'old'))
    os.makedirs(new, exist_ok=True)
    try:
        yield new
        if os.path.exists(path):
            os.rename(path, old)
        os.rename(new, path)
    finally:  # (stopped between the two renames: the old folder goes back)
        if os.path.exists(old) and not os.path.exists(path):
            os.rename(old, path)
        for folder in (new, old):
            shutil.rmtree(folder, ignore_errors=True)

def check_prepared(out_dir, train, held, sft_block):  # prepare.py: never a worse dataset
    size, old = sum(part.nbytes for part in train), os.path.join(out_dir, 'train.bin')
    if os.path.exists(old) and size < os.path.getsize(old) / 2:  # never for much less data
        raise InputError(f"{old} would shrink from {os.path.getsize(old):,} to {size:,} bytes: "
                         f"it is kept; check the settings, or remove {out_dir} to replace it")
    if not (held and train):  # (eval.py needs held-out documents)
        fix = f": raise --block_size={sft_block}" if sft_block else ''
        raise InputError(f"no {'training' if held else 'held-out'} documents left for "
                         f"{out_dir}{fix}")

def data_error(path, why):  # -> the error: the file, what is wrong, the fix
    from prepare import DATASETS, split_folder
    root, name = os.path.split(os.path.dirname(os.path.normpath(path)))
    dataset, tokenizer = split_folder(name)
    if dataset not in [*DATASETS, 'fineweb']:  # no prepare.py command makes it
        return InputError(f"{path} {why}; prepare.py makes data/{{topics,shakespeare,fineweb,sft}}"
                          f" (and *_byte), not {name}: check --dataset")
    extra = '' if os.path.normpath(root) == 'data' else f" --data_root={root}"
    return InputError(f"{path} {why}; make it with: python prepare.py --dataset={dataset} "
                      f"--tokenizer={tokenizer}{extra}")

def load_meta(data_dir):  # -> meta.json's tokenizer, vocab_size, eot, dtype and row (sft, else 0)
    path = os.path.join(data_dir, 'meta.json')
    if not os.path.isfile(path):  # paths are relative to the working directory: name it
        root = os.path.dirname(os.path.normpath(data_dir)) or '.'
        where = '' if os.path.isdir(root) else (f" (there is no {root}/ in the working directory "
                                                f"{os.getcwd()}: run from the one that holds it)")
        raise data_error(path, 'not found' + where)
    try:  # not UTF-8 or not JSON: ValueError; not an object: TypeError; a key missing: KeyError
        meta = json.load(open(path, 'rb'))
        meta = {**{k: meta[k] for k in ('tokenizer', 'vocab_size', 'eot', 'dtype')},
                'row': meta.get('row', 0)}
    except (ValueError, TypeError, KeyError) as e:
        why = f"lacks the key {e}" if isinstance(e, KeyError) else f"is not a JSON object ({e})"
        raise data_error(path, why) from None
    whole = all(type(meta[k]) is int for k in ('vocab_size', 'eot', 'row'))
    if not whole or meta['row'] < 0 or meta['row'] == 1:  # (row: 0, or an SFT row's tokens)
        raise data_error(path, f"has vocab_size {meta['vocab_size']!r}, eot {meta['eot']!r}, row "
                               f"{meta['row']!r}: each a whole number, a row 0 or 2 or more")
    eot = EOT.get(str(meta['tokenizer']))
    if (meta['eot'], meta['vocab_size']) != (eot, eot and eot + 1):  # (another tokenizer's data?)
        raise data_error(path, f"says tokenizer {meta['tokenizer']!r} with eot {meta['eot']} and "
                               f"vocab_size {meta['vocab_size']}: prepare.py's byte has 256, 257 "
                               "and gpt2 50256, 50257")
    with suppress(TypeError):  # (not a dtype at all: load_tokens says so)
        dtype = np.dtype(meta['dtype'])
        if dtype.kind not in 'ui' or np.iinfo(dtype).max < eot:
            raise data_error(path, f"says dtype {meta['dtype']}: token ids up to {eot} need one "
                                   "of whole numbers that holds them, e.g. uint16")
    return meta

def load_tokens(data_dir, split):  # the whole split as a np.memmap: read from disk as it is used
    meta, path = load_meta(data_dir), os.path.join(data_dir, f'{split}.bin')
    try:  # numpy refuses a missing or empty file, and one that is not a whole number of tokens
        tokens = np.memmap(path, meta['dtype'], 'r')
    except (OSError, ValueError, TypeError) as e:  # TypeError: meta.json's dtype is no dtype
        raise data_error(path, f"is unusable ({e})") from None
    if meta['row'] and len(tokens) % meta['row']:  # SFT: whole rows, as meta.json says
        raise data_error(path, f"holds {len(tokens):,} tokens: not whole rows of {meta['row']}")
    if (top := tokens.max()) >= meta['vocab_size']:  # it would index past the embedding
        raise data_error(path, f"holds token id {top} >= vocab_size {meta['vocab_size']}")
    return tokens

def read_eval_docs(path):  # -> (docs, n_bad): eval.jsonl's {"topic", "text"[, "answer"]} dicts
    if not os.path.isfile(path):
        raise data_error(path, 'not found')
    lines, docs = [line for line in open(path, 'rb') if line.strip()], []
    for line in lines:  # skipped: not UTF-8 or JSON (ValueError), not {"topic": str, "text": str}
        with suppress(ValueError, KeyError, TypeError):
            d = json.loads(line)
            if isinstance(d['topic'], str) and isinstance(d['text'], str):
                docs.append(d)
    if not docs:
        raise data_error(path, f"has no usable documents ({len(lines)} malformed lines)")
    return docs, len(lines) - len(docs)

def check_start(model, ckpt, meta, data_dir, block_size):  # a trained model against the data
    c, tokenizer = model.config, ckpt['meta']['tokenizer']
    if (tokenizer, c.vocab_size) != (meta['tokenizer'], meta['vocab_size']):
        raise InputError(f"{data_dir}/meta.json: tokenizer {meta['tokenizer']}, vocab_size "
                         f"{meta['vocab_size']}, but the model was trained on --dataset="
                         f"{ckpt['config']['dataset']} ({tokenizer}, vocab_size {c.vocab_size}): "
                         "prepare the data with the model's tokenizer")
    if block_size > c.block_size:
        sft = f" (SFT data: prepare rows of at most {c.block_size + 1} tokens)" * bool(meta['row'])
        raise InputError(f"--block_size={block_size} is larger than the model's {c.block_size}: "
                         f"lower it{sft}")

def check_eval(out_dir, device, dtype, dataset, block_size, suffix_start, exit_kind, thresholds,
               html):  # eval.py's settings for one model -> (model, data_dir, T, precision)
    model, ckpt = load_checkpoint(os.path.join(out_dir, 'ckpt.pt'), device)
    c, T = model.config, block_size or model.config.block_size
    if suffix_start >= T:
        raise InputError(f"--suffix_start={suffix_start} is not below the block size {T}: use "
                         f"1..{T - 1}, or 0 for the default")
    if (exit_kind or thresholds) and (lacks := lacks_exits(c)):
        given = f"--exit_kind={exit_kind}" if exit_kind else typed('thresholds', thresholds)
        raise InputError(f"{given}: the model in {out_dir} has {lacks}; drop it")
    own = ckpt['config']['dataset']  # the model's data, or --dataset's in the model's tokenizer
    from prepare import dataset_folder, split_folder
    data_dir = 'data/' + dataset_folder(split_folder(dataset or own)[0], split_folder(own)[1])
    check_start(model, ckpt, load_meta(data_dir), data_dir, T)
    if len(val := load_tokens(data_dir, 'val')) <= T:
        raise InputError(f"{data_dir}/val.bin has {len(val)} tokens, too few for block_size {T}: "
                         "set a smaller --block_size")
    check_output(os.path.join(out_dir, 'eval.json'), 'out_dir')
    if html:
        check_output(html, 'html')
    precision = autocast_dtype(device, dtype, trained=ckpt['config'].get('dtype', ''))
    return model.eval(), data_dir, T, precision

def resume_command():  # this very command, resuming: it runs as typed
    args = [a for a in sys.argv if not a.startswith(('--init_from=', '--overwrite='))]
    return shlex.join(['python', *args, '--init_from=resume'])

def run_settings(keys, defaults, rules):  # train.py's -> (settings, model, ckpt; None: scratch)
    from dataclasses import asdict
    typed_keys = {arg[2:].partition('=')[0] for arg in sys.argv[1:] if arg.startswith('--')}
    given = {k for k in keys if keys[k] != defaults[k]} | typed_keys
    init_from, ckpt_path = keys['init_from'], os.path.join(keys['out_dir'], 'ckpt.pt')
    check_output(ckpt_path, 'out_dir')  # before the work starts, not when it saves
    settings, model, ckpt = dict(keys), None, None
    if init_from == 'resume':  # the run's own settings but RUN_ONLY and the keys given
        model, ckpt = load_checkpoint(ckpt_path)
        run = {k: v for k, v in ckpt['config'].items() if k in keys and k not in RUN_ONLY}
        doing, where = 'resuming', keys['out_dir']
    elif init_from not in ('scratch', ''):  # fine-tuning: weights and architecture
        model, ckpt = load_checkpoint(os.path.join(init_from, 'ckpt.pt'), key='init_from')
        run = {k: v for k, v in asdict(model.config).items()
               if k not in ('vocab_size', 'block_size')}
        doing, where = 'fine-tuning', init_from
    if ckpt:  # given keys of the model and its data (block_size, dataset) must agree with it
        for key in sorted(given & set(run) & {*asdict(model.config), 'dataset'}):
            if settings[key] != run[key]:
                raise InputError(f"{typed(key, settings[key])}: the run in {where} has "
                                 f"{typed(key, run[key])}, which {doing} cannot change: drop "
                                 f"--{key}, or train a new --out_dir")
        settings = {**settings, **run, **{k: settings[k] for k in given}}
    check_rules(rules, settings, defaults)
    world, steps = int(os.environ.get('WORLD_SIZE', 1)), settings['gradient_accumulation_steps']
    if steps % world:
        raise InputError(f"--gradient_accumulation_steps={steps} counts the micro steps of all "
                         f"{world} processes: give a multiple of {world}, e.g. "
                         f"--gradient_accumulation_steps={world}")
    settings.update(device=get_device(settings['device']), given=given)
    return settings, model, ckpt

def check_train_data(s, meta, data_dir, train_data, val_data, iter_num):  # vs the settings s
    block_size, batch_size, row = s['block_size'], s['batch_size'], meta['row']
    if row and 'block_size' in s['given'] and block_size + 1 != row:  # SFT: rows set block_size
        raise InputError(f"--block_size={block_size}: {data_dir} holds SFT rows of {row} tokens, "
                         f"so block_size is {row - 1}: drop --block_size, or prepare rows of "
                         f"{block_size + 1}: prepare.py --dataset=sft --tokenizer="
                         f"{meta['tokenizer']} --block_size={block_size + 1}")
    if row and block_size != row - 1 and os.environ.get('RANK', '0') == '0':
        print(f"block_size = {row - 1}: {data_dir} holds SFT rows of {row} tokens")
    block_size = row - 1 if row else block_size
    for name, data in (('train', train_data), ('val', val_data)):
        if not row and len(data) <= block_size + 1:
            raise InputError(f"{data_dir}/{name}.bin has {len(data)} tokens, fewer than one block "
                             f"of {block_size + 1}: lower --block_size or prepare more data")
    if (tokens := batch_size * block_size) > train_data.size:  # (a typo? it would fill memory)
        raise InputError(f"--batch_size={batch_size}: a batch of {tokens:,} tokens is more than "
                         f"{data_dir}/train.bin holds ({train_data.size:,}): lower it")
    per_iter = s['gradient_accumulation_steps'] * tokens
    epochs = s['max_iters'] * per_iter / train_data.size
    if epochs > 1 and os.environ.get('RANK', '0') == '0':  # repeating the data overfits it
        print(f"warning: {s['max_iters']} iterations of {per_iter:,} tokens make {epochs:.1f} "
              f"epochs over {data_dir}/train.bin ({train_data.size:,} tokens): see README Configs")
    ckpt_path = os.path.join(s['out_dir'], 'ckpt.pt')
    if s['init_from'] != 'resume' and os.path.exists(ckpt_path) and not s['overwrite']:
        raise InputError(f"{ckpt_path} already holds a run: resume it with  {resume_command()}  "
                         "or start over on purpose with --overwrite=True (or another --out_dir)")
    if iter_num >= s['max_iters'] and not s['eval_only']:
        at = f"{ckpt_path} is at iter {iter_num} and " if s['init_from'] == 'resume' else ''
        raise InputError(f"nothing to train: {at}max_iters is {s['max_iters']}; raise --max_iters")

def check_loss(lossf, iter_num, last_loss, alphas, ckpt_path, s):  # s: the run's settings
    if not np.isfinite(lossf):
        given = ' '.join(typed(k, s[k]) for k in sorted(s['given']) if type(s[k]) is float)
        raise InputError(f"loss is {lossf} at iter {iter_num + 1} (last good loss {last_loss}); "
                         f"alphas {alphas}. Lower --learning_rate or --alpha_init"
                         f"{f' (this run sets {given})' * bool(given)}; {ckpt_path} was not "
                         "overwritten.")

def lock(out_dir):  # one run at a time in out_dir: a lock that the system drops if a run dies
    made = not os.path.isdir(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    f = open(os.path.join(out_dir, 'train.lock'), 'w')
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise InputError(f"another training run is writing to {out_dir}: wait for it to finish, "
                         "or pick another --out_dir") from None
    def unlock():  # the run ends: its lock file goes, and an out_dir it made but left empty
        os.remove(os.path.join(out_dir, 'train.lock'))
        if made and not os.listdir(out_dir):
            os.rmdir(out_dir)
    atexit.register(unlock)
    return f

def ran_on(threads):  # -> where a run ran: commit ('+' if the tree differs from it), torch, CPU
    import platform, subprocess, torch
    here = os.path.dirname(os.path.abspath(__file__))
    git = lambda *a: subprocess.Popen(['git', '-C', here, *a], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True).communicate()[0]
    commit = git('rev-parse', '--short', 'HEAD').strip() or 'unknown'
    dirty = '+' if git('status', '--porcelain', '--untracked-files=no').strip() else ''
    cpu = platform.machine()  # (platform.processor() runs a command: /proc/cpuinfo names it)
    with suppress(OSError):
        cpu = next(line.split(':', 1)[1].strip() for line in open('/proc/cpuinfo')
                   if line.startswith('model name'))
    return dict(commit=commit + dirty, torch=torch.__version__, cpu=cpu, threads=threads)

class Progress:  # a long loop says how far it is, every 5 s: progress(text) at each turn
    def __init__(self):
        self.t0 = time.time()

    def __call__(self, text):
        if time.time() - self.t0 > 5:
            print(text, flush=True)
            self.t0 = time.time()

class Stop:  # Ctrl-C, SIGTERM, SIGHUP ask to stop: finish the step, save, exit (again: at once)
    def __init__(self, ckpt_path, master):
        self.signals, self.ckpt_path, self.master = [], ckpt_path, master
        self.at_once = f"stopped at once; {ckpt_path} holds the last saved checkpoint"
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) != signal.SIG_IGN or signum != signal.SIGHUP:  # (nohup)
                signal.signal(signum, self.request)

    def request(self, signum, frame):
        self.signals.append(signum)
        if len(self.signals) > 1:
            raise SystemExit(self.at_once)
        with suppress(OSError):  # (a closed terminal cannot be written to: it saves all the same)
            if self.master:
                print(f"\nstopping: finishing this step, then saving {self.ckpt_path}; resume "
                      f"with  {resume_command()}  (again: stop at once)", flush=True)
        if signum == signal.SIGHUP:  # (the terminal is gone: what the run prints goes nowhere)
            sys.stdout = sys.stderr = open(os.devnull, 'w')

    def asked(self, ddp, device):  # by any process? (all must agree, or the others would hang)
        import torch
        asked = torch.tensor(float(len(self.signals)), device=device)
        if ddp:
            torch.distributed.all_reduce(asked)
        return asked.item() > 0

    def exit(self):  # a signal: exit as a shell reports it (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)
        if self.signals:
            sys.exit(128 + self.signals[0])

@contextmanager
def saving(path, what):  # -> path.tmp to write, renamed to path once whole: never half a file
    try:
        yield path + '.tmp'
        os.replace(path + '.tmp', path)
    except OSError as e:
        raise InputError(f"cannot save {path} {what}: {e.strerror}; it is left as it was: free "
                         "some space, or use another --out_dir") from None
    finally:  # (no partial file is left behind)
        pathlib.Path(path + '.tmp').unlink(missing_ok=True)

def save(ckpt, path, iter_num, stop):  # torch.save, atomically (saving)
    import torch
    try:
        with saving(path, f'at iter {iter_num}') as tmp, open(tmp, 'wb') as f:
            torch.save(ckpt, f)
    except RuntimeError:  # torch.save's writer fails when a second signal stops it mid-write
        if len(stop.signals) < 2:
            raise
        raise SystemExit(stop.at_once) from None
