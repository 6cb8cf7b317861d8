"""A user's loop over transformers' GPT-2 (a small config), recorded with steps 3 and 4
profiled: ``profiled.py RECORD``."""
import sys

import torch
import transformers

import memscope

torch.manual_seed(0)
torch.set_num_threads(2)
cfg = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64,
                              attn_implementation="sdpa")
model = transformers.GPT2LMHeadModel(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
ids = torch.randint(0, 1000, (4, 64))
with memscope.Session(model, opt, record=sys.argv[1], warmup=1, profile=range(3, 5)) as ms:
    for step in range(7):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        ms.step(loss)
