# How much of what each model generates is EOT padding (the study: SFT makes models "pad-spam").
# $ PYTHONPATH=. python lab/sft/eot_in_generations.py out-cpu-single out-cpu-sft ...
import torch, sys
from guards import load_checkpoint
from model import GPT
from decode import generate
from prepare import get_tokenizer
prompts = [
    "How was your weekend?",
    "What is 12 + 7?",
    "Write a function that adds two numbers.",
    "The market opened",
    "Shall I compare thee",
]
for d in sys.argv[1:]:
    torch.manual_seed(1337)
    m, ck = load_checkpoint(f'{d}/ckpt.pt', GPT.from_checkpoint)
    m.eval()
    enc, dec, eot = get_tokenizer(ck['meta']['tokenizer'])
    n_eot = n = 0; first = []
    for p in prompts:
        for _ in range(4):
            x = torch.tensor([enc(p)])
            out = generate(m, x, 120, temperature=1.0, top_k=50, top_p=0.9, repetition_penalty=1.2)
            y = out[0][0, len(enc(p)):].tolist()
            n += len(y); n_eot += sum(t == eot for t in y)
            first.append(y.index(eot) if eot in y else 120)
    mean_first = sum(first) / len(first)
    print(f"{d}: EOT share of generated tokens {n_eot / n:.1%}, "
          f"mean position of the first EOT {mean_first:.1f} of 120")
