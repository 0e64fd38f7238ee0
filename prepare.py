"""Download (with requests) and tokenize a dataset into data/<dataset>/ (GPT-2 tokens) or
data/<dataset>_byte/ (bytes): train.bin, val.bin (token ids, EOT ends each document; sft: rows),
meta.json, eval.jsonl (held-out documents). Other scripts import its tokenizers and formats.
$ python prepare.py --dataset=topics --tokenizer=byte --mirror=../shared/data"""
import csv, gzip, html, io, itertools, json, os, pathlib, random, re, zipfile, zlib
from contextlib import ExitStack, suppress
from guards import InputError, check_output, check_prepared, lock, unlock, written
import numpy as np

dataset = 'topics'  # topics: code, math, dialogue, news, poetry
tokenizer = 'gpt2'  # 'gpt2' (tiktoken BPE) or 'byte' (256 bytes + EOT, no vocabulary files)
shards = 4  # fineweb: train shards of 100M tokens
mirror = ''  # a folder laid out as <host>/<path> (../shared/data), read instead of the network
base_url = 'https://raw.githubusercontent.com'  # the servers of HOST and HF_HOST
hf_url = 'https://huggingface.co'
eval_docs = 200  # documents held out per topic for eval.jsonl
block_size = 256  # sft: tokens a row
seed = 1337
data_root = 'data'

HOST = 'raw.githubusercontent.com'
SHAKESPEARE = 'karpathy/char-rnn/master/data/tinyshakespeare/input.txt'
CODEALPACA = 'sahil280114/codealpaca/master/data/new_codealpaca.json'
HUMANEVAL = 'openai/human-eval/master/data/HumanEval.jsonl.gz'
GSM8K = 'openai/grade-school-math/master/grade_school_math/data/%s.jsonl'
DAILYDIALOG = 'diixo/daily-dialogs-dataset/main/dataset/%s.zip'
AGNEWS = 'mhjabreel/CharCnn_Keras/master/data/ag_news_csv/test.csv'
SONNETS = 'danfriedman0/neural-sonnets/master/data/sonnets.txt'
HF_HOST = 'huggingface.co'  # FineWeb, GPT-2 tokenized, in llm.c's shard format
FINEWEB = 'datasets/kjj0/fineweb10B-gpt2/resolve/main/fineweb_%s_%06d.bin'  # % (split, i)

def get_tokenizer(name):  # -> (encode, decode, eot); vocab_size is eot + 1
    if name == 'byte':  # EOT decodes as GPT-2's '<|endoftext|>', so a document boundary shows
        token = lambda i: b'<|endoftext|>' if i == 256 else bytes([i])
        decode = lambda ids: b''.join(map(token, map(int, ids))).decode('utf-8', 'replace')
        return (lambda text: list(text.encode('utf-8'))), decode, 256
    if name != 'gpt2':
        raise InputError(f"unknown tokenizer '{name}': choose 'gpt2' or 'byte'")
    import tiktoken  # (byte-level runs never need it)
    try:
        enc = tiktoken.get_encoding('gpt2')
    except (OSError, ValueError) as e:
        raise InputError(f"no gpt2 BPE files ({type(e).__name__}): export TIKTOKEN_CACHE_DIR=a "
                         "folder that holds them (offline: ../shared/tiktoken)"
                         + " or use --tokenizer=byte" * (__name__ == '__main__')) from None
    return enc.encode_ordinary, lambda ids: enc.decode(list(map(int, ids))), enc.eot_token

def token_rows(data, starts, T):  # -> (len(starts), T) int64
    return np.stack([data[i:i + T] for i in starts]).astype(np.int64)

def sft_targets(rows, eot, pad=True):
    """The targets of SFT rows (B, T + 1) of prompt, EOT, answer, EOT, EOT padding: -1 (no loss)
    for the prompt and its EOT; the padding counts only with pad (the study's "grid" SFT)."""
    eots = (rows == eot).long()
    before = (eots.cumsum(1) - eots)[:, 1:]  # EOTs before each target: 0 prompt, 1 answer, 2+ pad
    ignored = (before == 0) | ((before >= 2) & (not pad))
    return rows[:, 1:].masked_fill(ignored, -1)

def fetch(path, host=HOST):  # -> the local copy of https://<host>/<path>
    local = os.path.join(mirror or os.path.join(data_root, 'downloads'), host, path)
    if os.path.isfile(local):  # the mirror's, or an earlier download
        return local
    if os.path.exists(local):  # (a FIFO would hang the read, a folder is no file)
        raise InputError(f"{local} is not a regular file: delete it to fetch it again, or copy the "
                         "file whole into --mirror")
    if mirror:
        raise InputError(f"{local} not found: --mirror must be laid out as <host>/<path>")
    import requests  # (only a download needs it)
    url = {HOST: base_url, HF_HOST: hf_url}[host].rstrip('/') + '/' + path
    plain = {'Accept-Encoding': 'identity'}  # so Content-Length counts the bytes we store
    got = []  # the body's chunks: stored once all have come
    try:  # requests' errors (a body cut short of its Content-Length too) are OSErrors
        with requests.get(url, headers=plain, stream=True, timeout=30) as r:
            r.raise_for_status()
            total = int(r.headers.get('Content-Length', 0))
            for chunk in r.iter_content(1 << 20):
                got.append(chunk)
                done = sum(map(len, got))
                print(f"\rdownloading {url}: {done:,} / {total:,} bytes", end='', flush=True)
        print()
    except OSError as e:
        raise InputError(f"download of {url} failed ({' '.join(str(e).split())}); offline, pass "
                         "--mirror=../shared/data (a folder laid out as <host>/<path>)") from None
    with written(local, 'wb') as f:  # whole or not at all: a rerun never reads a cut-off file
        f.writelines(got)
    return local

def read(path, parse=str):  # -> parse(a download's text; a .zip's: its bytes); damaged: named
    local = fetch(path)
    try:  # cut short, not UTF-8, not JSON or CSV, a row or member missing: one line
        data = pathlib.Path(local).read_bytes()
        data = gzip.decompress(data) if path.endswith('.gz') else data
        return parse(data if path.endswith('.zip') else data.decode('utf-8'))
    except (ValueError, LookupError, TypeError, EOFError, OSError, zlib.error, zipfile.BadZipFile,
            csv.Error) as e:
        raise InputError(f"{local} is damaged ({type(e).__name__}: {e}): delete it to fetch it "
                         "again, or copy it whole into --mirror") from None
def jsonl(path, rows=lambda rows: rows):
    return read(path, lambda text: rows([json.loads(s) for s in text.splitlines() if s.strip()]))
def blank_line_separated(path):  # sonnets, the play's speeches
    return [d.strip() for d in re.split(r'\n\s*\n', read(path))]
def joined(parts):  # the non-blank parts, one a line (an SFT pair as one document)
    return '\n'.join(part for part in parts if part.strip())
def line_pairs(doc):  # a dialogue's (turn, reply)
    return itertools.pairwise(doc.split('\n'))

def code_pairs():  # CodeAlpaca: (the task and its input, the answer)
    return read(CODEALPACA, lambda text: [(joined([r['instruction'], r['input']]), r['output'])
                                          for r in json.loads(text)])
def code_docs():  # the pairs as documents, and HumanEval's prompt + solution
    docs = list(map(joined, code_pairs()))
    solved = lambda rows: [r['prompt'] + r['canonical_solution'] for r in rows]
    return docs + jsonl(HUMANEVAL, solved)

def math_pairs():  # GSM8K: (the question, the worked answer, '#### N' last)
    pairs = lambda rows: [(r['question'], r['answer']) for r in rows]
    return jsonl(GSM8K % 'train', pairs) + jsonl(GSM8K % 'test', pairs)

def dialogue_docs():  # DailyDialog: a dialogue a line, its turns ended by __eou__
    docs = []
    for split in ['train', 'validation', 'test']:
        lines = read(DAILYDIALOG % split, lambda data: zipfile.ZipFile(io.BytesIO(data)).read(
            f'{split}/dialogues_{split}.txt').decode('utf-8').splitlines())
        docs += ['\n'.join(filter(None, map(detokenize, line.split('__eou__')))) for line in lines]
    return docs
def detokenize(turn):  # DailyDialog is space-tokenised: undo the commonest cases
    for spaced in [' ,', ' .', ' ?', ' !', " ' ", ' \u2019 ']:
        turn = turn.replace(spaced, spaced.strip())
    return turn.strip()
def dialogue_pairs():
    return [pair for d in dialogue_docs() for pair in line_pairs(d)]

def news_docs():  # AG News CSV rows: class, title, description
    return read(AGNEWS, lambda text: [unescape(title) + '\n' + unescape(desc) for _, title, desc
                                      in csv.reader(io.StringIO(text, newline=''))])
def unescape(s):  # AG News writes a line break as '\' and '$' as '#36;' ('&#36;' minus its '&')
    return html.unescape(re.sub(r'#(\d+);', r'&#\1;', s.replace('\\', '\n'))).strip()

DATASETS = {'shakespeare': {'shakespeare': lambda: blank_line_separated(SHAKESPEARE)},
            'topics': {'code': code_docs, 'math': lambda: list(map(joined, math_pairs())),
                       'dialogue': dialogue_docs, 'news': news_docs,
                       'poetry': lambda: blank_line_separated(SONNETS)},
            'sft': {'code': code_pairs, 'math': math_pairs, 'dialogue': dialogue_pairs}}

def held_and_kept(name):  # -> (eval.jsonl's held-out {'topic', 'text'}, the kept docs)
    held, kept = [], []
    for topic, source in DATASETS[name].items():
        docs = list(dict.fromkeys(d for d in source() if d.strip()))  # once: never in both
        n_held = min(eval_docs, len(docs) // 2)  # at random, the same on every run
        out = set(random.Random(f'{seed}:{topic}').sample(range(len(docs)), n_held))
        held += [{'topic': topic, 'text': docs[i]} for i in sorted(out)]
        kept += [d for i, d in enumerate(docs) if i not in out]
        print(f"{topic:>11}: kept {len(docs) - n_held:,} docs, held out {n_held:,}")
    return held, kept

def sft_split():  # -> (held [(topic, (prompt, answer))], kept pairs)
    """A sample is held out if it comes from a document that topics holds out, pre-training never
    met it, and no kept sample has its prompt or answer (DailyDialog repeats 'Thank you.')."""
    held_docs, kept_docs = held_and_kept('topics')
    texts = lambda docs: {*docs, *(p for d in docs for p in line_pairs(d))}
    in_held, in_kept = texts([d['text'] for d in held_docs]), texts(kept_docs)
    held, kept = [], []
    for topic, source in DATASETS['sft'].items():
        for pair in dict.fromkeys(p for p in source() if joined(p)):
            met = {pair, joined(pair)}  # as a (turn, reply) or as a whole document
            if met & in_held and not met & in_kept:
                held.append((topic, pair))
            else:
                kept.append(pair)
    kept_texts = {text for pair in kept for text in pair}
    unique = [(topic, pair) for topic, pair in held if not kept_texts & set(pair)]
    print(f"held out {len(unique):,} samples of topics' held-out documents (dropped "
          f"{len(held) - len(unique):,} that share a prompt or answer with the {len(kept):,} kept)")
    return unique, kept

def documents():  # -> (eot, held, train, val): token arrays, one a document (sft: a row)
    encode, _, eot = get_tokenizer(tokenizer)
    held, kept = sft_split() if dataset == 'sft' else held_and_kept(dataset)
    if dataset != 'shakespeare':  # mix the topics; the play's speeches stay in order
        random.Random(seed).shuffle(kept)
    doc = lambda text: encode(text) + [eot]
    held, docs = sft(doc, eot, held, kept) if dataset == 'sft' else (held, list(map(doc, kept)))
    n = int(0.9 * len(docs))  # 90% train, the rest val (never empty: n < len(docs))
    docs = [np.array(d, 'uint16') for d in docs]  # (ids up to 50256)
    return eot, held, docs[:n], docs[n:]

def sft(doc, eot, held, kept):  # -> (held, rows): prompt, EOT, answer, EOT, EOT padding
    samples = [doc(prompt) + doc(answer) for prompt, answer in kept]
    rows = [s + [eot] * (block_size - len(s)) for s in samples if len(s) <= block_size]
    print(f"dropped {len(samples) - len(rows):,} of {len(samples):,} samples: longer than "
          f"block_size={block_size}")
    fit = [(t, (p, a)) for t, (p, a) in held if len(doc(p) + doc(a)) <= block_size]
    print(f"held out, fitting block_size={block_size}: " + ', '.join(  # (eval.jsonl's, per topic)
        f"{t} {sum(f[0] == t for f in fit):,} of {sum(h[0] == t for h in held):,}"
        for t in DATASETS['sft']))
    return [{'topic': t, 'text': prompt, 'answer': answer} for t, (prompt, answer) in fit], rows

def fineweb():  # -> (eot, held, train, val): one array a shard (train: 1..shards, val: 0)
    held, _ = held_and_kept('topics')  # eval.py reads the topics' held-out documents
    val = [read_shard(fetch(FINEWEB % ('val', 0), HF_HOST))]
    train = [read_shard(fetch(FINEWEB % ('train', i), HF_HOST)) for i in range(1, shards + 1)]
    return 50256, held, train, val  # GPT-2's EOT (it starts each document)
def read_shard(path):  # llm.c: 256 int32 (magic 20240520, version 1, token count), the tokens
    header, size = np.fromfile(path, dtype='<i4', count=256), os.path.getsize(path)
    if len(header) < 256 or list(header[:2]) != [20240520, 1] or size != 1024 + 2 * int(header[2]):
        raise InputError(f"{path} is not a whole llm.c shard (magic 20240520, version 1, token "
                         f"count): header {header[:3].tolist()}, {size:,} bytes")
    return np.memmap(path, dtype='<u2', mode='r', offset=1024)

# ----------------------------------------------------------------------------- the readers
# Every script reads the data through these: each names the file and the fix on any damage
def data_error(path, why):  # -> the error: the file, what is wrong, the fix to make it
    root, name = os.path.split(os.path.dirname(os.path.normpath(path)))
    dataset, tokenizer = name.removesuffix('_byte'), 'byte' if name.endswith('_byte') else 'gpt2'
    if dataset not in [*DATASETS, 'fineweb']:  # no prepare.py command makes it
        return InputError(f"{path} {why}; prepare.py makes data/{{topics,shakespeare,fineweb,sft}}"
                          f" (and *_byte), not {name}: check --dataset")
    extra = '' if os.path.normpath(root) == 'data' else f" --data_root={root}"
    return InputError(f"{path} {why}; make it (offline: add --mirror=a folder of its downloads"
                      f" as <host>/<path>) with: python prepare.py --dataset={dataset} "
                      f"--tokenizer={tokenizer}{extra}")

def regular(path):  # -> path, if it is a file; else the error naming it (a FIFO would hang)
    if not os.path.isfile(path):
        raise data_error(path, 'is not a file' if os.path.exists(path) else 'not found')
    return path

def load_meta(data_dir):  # -> meta.json's tokenizer, vocab_size, eot, dtype and row (sft, else 0)
    path, root = os.path.join(data_dir, 'meta.json'), os.path.dirname(os.path.normpath(data_dir))
    if not os.path.isdir(root or '.'):  # (paths are relative to the working directory: name it)
        raise data_error(path, f"not found (there is no {root}/ in the working directory "
                               f"{os.getcwd()}: run from the one that holds it)")
    if not os.path.exists(path) and os.path.exists(os.path.join(data_dir, 'train.bin')):
        raise data_error(path, "not found beside its train.bin: it says how to read it, JSON of "
                               "tokenizer (gpt2, byte), vocab_size, eot and dtype (uint16)")
    regular(path)
    try:  # not UTF-8 or not JSON: ValueError; not an object: TypeError; a key missing: KeyError
        meta = json.load(open(path, 'rb'))
        meta = {**{k: meta[k] for k in ('tokenizer', 'vocab_size', 'eot', 'dtype')},
                'row': meta.get('row', 0)}
    except (ValueError, TypeError, KeyError) as e:
        why = f"lacks the key {e}" if isinstance(e, KeyError) else f"is not a JSON object ({e})"
        raise data_error(path, why) from None
    # what main() writes for its tokenizer (repr: 257.0 or '257' is not 257), else remade
    eot, row = {'byte': 256, 'gpt2': 50256}.get(str(meta['tokenizer'])), meta['row']
    says = f"eot {meta['eot']!r}, vocab_size {meta['vocab_size']!r}, dtype {meta['dtype']!r}"
    if eot is None or says != f"eot {eot}, vocab_size {eot + 1}, dtype 'uint16'" or (
            type(row) is not int or row < 0 or row == 1):  # (row: 0, or an SFT row's tokens)
        raise data_error(path, f"says tokenizer {meta['tokenizer']!r}, {says}, row {row!r}: "
                               "prepare.py writes byte with eot 256, vocab_size 257 or gpt2 with "
                               "50256, 50257, dtype 'uint16', a row 0 (sft: 2 or more)")
    return meta

def load_tokens(data_dir, split):  # the whole split as a np.memmap: read from disk as it is used
    meta, path = load_meta(data_dir), regular(os.path.join(data_dir, f'{split}.bin'))
    try:  # numpy refuses a missing or empty file, and one that is not a whole number of tokens
        tokens = np.memmap(path, meta['dtype'], 'r')
    except (OSError, ValueError) as e:
        raise data_error(path, f"is unusable ({e})") from None
    if meta['row'] and len(tokens) % meta['row']:  # SFT: whole rows, as meta.json says
        raise data_error(path, f"holds {len(tokens):,} tokens: not whole rows of {meta['row']}")
    if (top := tokens.max()) >= meta['vocab_size']:  # it would index past the embedding
        raise data_error(path, f"holds token id {top} >= vocab_size {meta['vocab_size']}")
    return tokens

def read_eval_docs(path):  # -> (docs, n_bad): eval.jsonl's {"topic", "text"[, "answer"]} dicts
    lines, docs = [line for line in open(regular(path), 'rb') if line.strip()], []
    for line in lines:  # skipped: not UTF-8 or JSON (ValueError), not {"topic": str, "text": str}
        with suppress(ValueError, KeyError, TypeError):
            d = json.loads(line)
            if isinstance(d['topic'], str) and isinstance(d['text'], str):
                docs.append(d)
    if not docs:
        raise data_error(path, f"has no usable documents ({len(lines)} malformed lines)")
    return docs, len(lines) - len(docs)

def main():
    out_dir = os.path.join(data_root, dataset + '_byte' * (tokenizer == 'byte'))  # topics_byte
    check_output(out_dir, 'data_root', folder=True)
    with ExitStack() as held:  # one prepare.py at a time writes out_dir (its lock); each file is
        held.callback(unlock, lock(out_dir, 'prepare.py', 'dataset'))  # whole before any replaces
        eot, docs, train, val = (fineweb if dataset == 'fineweb' else documents)()  # its old one
        check_prepared(out_dir, train, docs, dataset == 'sft' and block_size)
        meta = dict(tokenizer=tokenizer, vocab_size=eot + 1, eot=eot, dtype=str(val[0].dtype),
                    row=block_size if dataset == 'sft' else 0)  # sft: train.py draws whole rows
        lines = ''.join(json.dumps(d, ensure_ascii=False) + '\n' for d in docs)
        files = {'train.bin': train, 'val.bin': val, 'eval.jsonl': [lines.encode()],
                 'meta.json': [json.dumps(meta, indent=2).encode()]}
        for name, parts in files.items():  # (stopped or failed: the old files stay as they were)
            f = held.enter_context(written(os.path.join(out_dir, name), 'wb'))
            f.writelines(parts)  # bytes or token arrays (a shard: memory-mapped)
            print(f"wrote {os.path.join(out_dir, name)}: {f.tell():,} bytes")

if __name__ == '__main__':
    exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configurator.py')).read())
    main()
