# cpu_sft with the pad targets ignored: the loss covers only the answer and its EOT. Ranked against
# cpu_sft by masked and by unmasked suffix NLL, it shows why the benchmark must mask padding:
# $ python train.py config/cpu_sft_nopad.py
# $ python eval.py --out_dir=out-cpu-sft,out-cpu-sft-nopad --dataset=sft
include('cpu_sft.py')
out_dir = 'out-cpu-sft-nopad'
sft_pad = False
