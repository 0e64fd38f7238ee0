"""Download (with requests) and tokenize a dataset into data/<dataset>/ (gpt2) or data/<dataset>_byte/:
train.bin, val.bin (token ids, EOT after every document), meta.json, eval.jsonl (held-out documents).
$ python prepare.py --dataset=topics --tokenizer=byte --mirror=../shared/data
Other scripts import the tokenizers and file readers below; importing this file does nothing else."""
import csv, gzip, html, io, json, os, random, re, zipfile
import numpy as np

dataset = 'topics'  # 'topics' (code, math, dialogue, news, poetry) or 'shakespeare'
tokenizer = 'gpt2'  # 'gpt2' (tiktoken BPE) or 'byte' (256 bytes + EOT, needs no vocabulary files)
mirror = ''  # folder laid out as <host>/<path> (e.g. ../shared/data), read instead of the network
base_url = 'https://raw.githubusercontent.com'  # downloads come from base_url/<path>
eval_docs = 200  # documents held out per topic for eval.jsonl
seed = 1337
data_root = 'data'

HOST = 'raw.githubusercontent.com'  # mirror layout: <mirror>/<HOST>/<path>
SHAKESPEARE = 'karpathy/char-rnn/master/data/tinyshakespeare/input.txt'
CODEALPACA = 'sahil280114/codealpaca/master/data/new_codealpaca.json'
HUMANEVAL = 'openai/human-eval/master/data/HumanEval.jsonl.gz'
GSM8K = 'openai/grade-school-math/master/grade_school_math/data/%s.jsonl'
DAILYDIALOG = 'diixo/daily-dialogs-dataset/main/dataset/%s.zip'
AGNEWS = 'mhjabreel/CharCnn_Keras/master/data/ag_news_csv/test.csv'
SONNETS = 'danfriedman0/neural-sonnets/master/data/sonnets.txt'

# ---------------------------------------------------------------- shared with train / sample / eval
def get_tokenizer(name):  # -> (encode, decode, eot); vocab_size is always eot + 1
    if name == 'byte':
        decode = lambda ids: bytes(i for i in map(int, ids) if i < 256).decode('utf-8', errors='replace')
        return (lambda text: list(text.encode('utf-8'))), decode, 256
    if name == 'gpt2':
        import tiktoken  # only here, so byte-level runs need no vocabulary files
        try:
            enc = tiktoken.get_encoding('gpt2')  # downloads the BPE files unless they are in TIKTOKEN_CACHE_DIR
        except (OSError, ValueError) as e:
            raise ValueError(f"no gpt2 BPE files ({type(e).__name__}): export TIKTOKEN_CACHE_DIR=../shared/tiktoken "
                             "or use --tokenizer=byte") from None
        decode = lambda ids: enc.decode([i for i in map(int, ids) if i < enc.eot_token])  # like 'byte': drops EOT, padding ids
        return enc.encode_ordinary, decode, enc.eot_token
    raise ValueError(f"unknown tokenizer '{name}': choose 'gpt2' or 'byte'")

def load_meta(data_dir):
    path = os.path.join(data_dir, 'meta.json')
    if not os.path.isfile(path):  # name the command that makes it, not just the missing file
        root, name = os.path.split(os.path.normpath(data_dir))
        ds, tok = (name[:-5], 'byte') if name.endswith('_byte') else (name, 'gpt2')
        extra = f" --data_root={root}" if os.path.normpath(root) != 'data' else ''
        raise FileNotFoundError(f"{path} not found; make it with: python prepare.py --dataset={ds} --tokenizer={tok}{extra}")
    with open(path) as f:
        return json.load(f)

def load_tokens(data_dir, split):
    return np.memmap(os.path.join(data_dir, f'{split}.bin'), dtype=load_meta(data_dir)['dtype'], mode='r')

def read_eval_docs(path):  # -> (docs, n_bad): eval.jsonl's {"topic", "text"} dicts; malformed lines skipped, counted
    with open(path, encoding='utf-8', errors='replace') as f:
        rows = [_json_or_none(line) for line in f if line.strip()]
    docs = [d for d in rows if isinstance(d, dict) and all(isinstance(d.get(k), str) for k in ('topic', 'text'))]
    return docs, len(rows) - len(docs)

def _json_or_none(line):
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None

def fetch(path):  # the bytes of base_url/path: from the mirror if set, else downloaded once into data_root/downloads
    local = os.path.join(mirror, HOST, path) if mirror else os.path.join(data_root, 'downloads', path)
    if not os.path.isfile(local):
        if mirror:
            raise FileNotFoundError(f"{local} not found: --mirror must be a folder laid out as <host>/<path>")
        download(f"{base_url.rstrip('/')}/{path}", local)
    with open(local, 'rb') as f:
        return f.read()

def download(url, dst):
    import requests
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = dst + '.tmp'  # renamed only once complete, so a cut-off download never looks like a cached file
    try:
        # identity encoding: Content-Length then counts the bytes we store, so a short read is detectable
        with requests.get(url, stream=True, timeout=30, headers={'Accept-Encoding': 'identity'}) as r, open(tmp, 'wb') as f:
            r.raise_for_status()
            total, n = int(r.headers.get('Content-Length', 0)), 0
            for chunk in r.iter_content(1 << 20):
                n += f.write(chunk)
                print(f"\rdownloading {url}: {n:,} / {total:,} bytes", end='', flush=True)
            print()
        if total and n != total:
            raise OSError(f"connection closed after {n:,} of {total:,} bytes")
        os.replace(tmp, dst)
    except (OSError, requests.RequestException) as e:  # one-line ValueError: configurator prints it, no traceback
        raise ValueError(f"download of {url} failed ({' '.join(str(e).split())}); offline, pass --mirror=../shared/data "
                         f"(or any folder laid out as <host>/<path>)") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)

# sources: one function per topic, each -> list of documents
def jsonl(data):
    return [json.loads(line) for line in data.decode('utf-8').splitlines() if line.strip()]

def blank_line_separated(data):
    return [d.strip() for d in re.split(r'\n\s*\n', data.decode('utf-8'))]

def code_docs():  # CodeAlpaca: task (+ input) then answer; HumanEval: prompt then its reference body
    alpaca = ['\n'.join(p for p in (r['instruction'], r.get('input', ''), r['output']) if p.strip())
              for r in json.loads(fetch(CODEALPACA))]
    return alpaca + [r['prompt'] + r['canonical_solution'] for r in jsonl(gzip.decompress(fetch(HUMANEVAL)))]

def math_docs():  # GSM8K: question, then the worked answer ending in '#### N'
    return [r['question'] + '\n' + r['answer'] for split in ('train', 'test') for r in jsonl(fetch(GSM8K % split))]

def detokenize(turn):  # DailyDialog is space-tokenised; undo the commonest cases only
    for a, b in ((' ,', ','), (' .', '.'), (' ?', '?'), (' !', '!'), (" ' ", "'"), (' \u2019 ', '\u2019')):
        turn = turn.replace(a, b)
    return turn.strip()

def dialogue_docs():  # DailyDialog: one dialogue a line, turns split by __eou__ -> one turn a line
    docs = []
    for split in ('train', 'validation', 'test'):
        with zipfile.ZipFile(io.BytesIO(fetch(DAILYDIALOG % split))) as z:  # read in memory: never extract archive paths
            text = z.read(f'{split}/dialogues_{split}.txt').decode('utf-8')
        docs += ['\n'.join(filter(None, map(detokenize, line.split('__eou__')))) for line in text.splitlines()]
    return docs

def news_docs():  # AG News CSV (class, title, description); '\' is a line break, '#36;' is '&#36;' ('$') minus its '&'
    fix = lambda s: html.unescape(re.sub(r'#(\d+);', r'&#\1;', s.replace('\\', '\n'))).strip()
    return [fix(title) + '\n' + fix(desc) for _, title, desc in csv.reader(io.StringIO(fetch(AGNEWS).decode('utf-8')))]

DATASETS = {'shakespeare': {'shakespeare': lambda: blank_line_separated(fetch(SHAKESPEARE))},  # a document = a speech
            'topics': {'code': code_docs, 'math': math_docs, 'dialogue': dialogue_docs, 'news': news_docs,
                       'poetry': lambda: blank_line_separated(fetch(SONNETS))}}  # a document = a sonnet

def save(path, data):  # tmp + rename: a crash never leaves a half-written file
    with open(path + '.tmp', 'wb') as f:
        f.write(data)
    os.replace(path + '.tmp', path)

def main():
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset '{dataset}': choose one of {', '.join(DATASETS)}")
    encode, _, eot = get_tokenizer(tokenizer)
    dtype = 'uint16' if eot < 2**16 else 'uint32'
    held, kept = [], []  # (topic, text) / token array of a document incl. its EOT
    for topic, source in DATASETS[dataset].items():
        docs = list(dict.fromkeys(d for d in source() if d.strip()))  # no empty or repeated docs: no eval doc is trained on
        out = set(random.Random(f'{seed}:{topic}').sample(range(len(docs)), min(eval_docs, len(docs) // 2)))
        toks = [np.array(encode(d) + [eot], dtype) for d in docs]
        held += [(topic, d) for i, d in enumerate(docs) if i in out]
        kept += [t for i, t in enumerate(toks) if i not in out]
        n_out = sum(len(t) for i, t in enumerate(toks) if i in out)
        print(f"{topic:>11}: kept {len(docs) - len(out):,} docs, {sum(map(len, toks)) - n_out:,} tokens; "
              f"held out {len(out):,} docs, {n_out:,} tokens")
    if dataset == 'topics':  # mix the topics; shakespeare keeps its order so the text reads on
        random.Random(seed).shuffle(kept)
    n = min(int(0.9 * len(kept)), len(kept) - 1)  # first 90% of documents train, the rest val (never empty)
    if n < 1:
        raise ValueError(f"only {len(kept)} documents left for train and val; lower --eval_docs")
    out_dir = os.path.join(data_root, dataset + ('_byte' if tokenizer == 'byte' else ''))
    os.makedirs(out_dir, exist_ok=True)
    for split, part in (('train', kept[:n]), ('val', kept[n:])):
        ids = np.concatenate(part)
        print(f"{split}: {len(part):,} docs, {len(ids):,} tokens")
        save(os.path.join(out_dir, f'{split}.bin'), ids.tobytes())
    save(os.path.join(out_dir, 'eval.jsonl'), ''.join(json.dumps({'topic': t, 'text': d}, ensure_ascii=False) + '\n'
                                                      for t, d in held).encode('utf-8'))
    meta = {'tokenizer': tokenizer, 'vocab_size': eot + 1, 'eot': eot, 'dtype': dtype}
    save(os.path.join(out_dir, 'meta.json'), json.dumps(meta, indent=2).encode())  # last: meta.json means complete
    print(f"wrote {out_dir}: train.bin, val.bin, eval.jsonl ({len(held):,} docs), meta.json")

if __name__ == '__main__':
    exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configurator.py')).read())
    main()
