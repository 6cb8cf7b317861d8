"""The same tiny GPT-2 (built from a config, nothing downloaded), batch and AdamW, trained 5
steps by a plain loop, the Hugging Face Trainer or Lightning (argv[1]), each recorded by memscope.
With argv[2] = N > 1, gradient accumulation over N micro-batches of 4 / N sequences.
Writes KIND.json."""

import sys

import torch
import transformers

import memscope

kind = sys.argv[1]
ACCUM = int(sys.argv[2]) if len(sys.argv) > 2 else 1
STEPS, B, T = 5, 4, 32
MB = B // ACCUM
cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64,
                              resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
torch.manual_seed(0)
model = transformers.GPT2LMHeadModel(cfg)
ids = torch.randint(0, cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(1))
rows = [{"input_ids": ids[i], "labels": ids[i]} for i in range(B)]
record = f"{kind}.json"

if kind == "plain":
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    model.train()
    with memscope.Session(model, opt, record=record, warmup=1) as ms:
        for _ in range(STEPS):
            for k in range(ACCUM):
                part = ids[k * MB:(k + 1) * MB]
                loss = model(input_ids=part, labels=part).loss / ACCUM
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            ms.step(loss)

elif kind == "hf":
    from memscope.hf import MemscopeCallback

    args = transformers.TrainingArguments(
        output_dir="hf-out", per_device_train_batch_size=MB, max_steps=STEPS,
        gradient_accumulation_steps=ACCUM, learning_rate=1e-3,
        weight_decay=0.0, optim="adamw_torch", use_cpu=True, report_to=[], save_strategy="no",
        logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0, seed=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=rows,
                                   callbacks=[MemscopeCallback(record, warmup=1)])
    trainer.train()

elif kind == "lightning":
    import lightning.pytorch as pl
    from memscope.lightning import MemscopeCallback

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model

        def training_step(self, batch, batch_idx):
            return self.model(input_ids=batch["input_ids"], labels=batch["labels"]).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3, weight_decay=0.0)

    loader = torch.utils.data.DataLoader(rows, batch_size=MB, shuffle=False)
    trainer = pl.Trainer(max_steps=STEPS, accelerator="cpu", devices=1, logger=False,
                         accumulate_grad_batches=ACCUM,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0,
                         callbacks=[MemscopeCallback(record, warmup=1)])
    trainer.fit(Module(), loader)
else:
    sys.exit(f"unknown kind {kind}: plain, hf or lightning")
