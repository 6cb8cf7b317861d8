"""A small MLP recorded in one of several ways a real training script ends (argv[1]):
- raise: the loop raises in step 3's backward; - interrupt: KeyboardInterrupt in step 3;
- exit0: sys.exit(0) after 3 steps, inside the `with`; - self: record= names this script;
- hf-raise: a Hugging Face Trainer whose model raises at step 3 (the Trainer calls no callback:
  the Record is written at the interpreter's exit); - pl-raise, pl-nan: a Lightning module that
  raises at step 3 / whose loss is NaN from step 2 (Lightning's on_exception closes the
  session); - fixed N / keep N: N steps of one fixed loop / one that keeps every step's loss
  with its graph (`total = total + loss`), for the series' verdict.
Writes run.json and run.steps.jsonl."""

import sys

import torch
import torch.nn as nn

import memscope

kind = sys.argv[1]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 16)


class Boom(Exception):
    pass


if kind == "self":
    memscope.Session(model, opt, record=__file__)

if kind in ("raise", "interrupt", "exit0"):
    with memscope.Session(model, opt, record="run.json", warmup=0) as ms:
        for step in range(6):
            loss = model(x).square().mean()
            if step == 3 and kind == "raise":
                raise Boom("diverged")
            if step == 3 and kind == "interrupt":
                raise KeyboardInterrupt
            loss.backward()
            opt.step()
            opt.zero_grad()
            ms.step(loss)
            if step == 2 and kind == "exit0":
                sys.exit(0)

if kind in ("fixed", "keep"):
    steps = int(sys.argv[2])
    total = 0
    with memscope.Session(model, opt, record="run.json", warmup=2) as ms:
        for step in range(steps):
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
            if kind == "keep":
                total = total + loss
            ms.step(loss)
    # What the recorder holds per saved storage (a constant input is saved every step).
    print("saved refs", max((len(e[2]) for e in ms.saved.entries.values()), default=0))
    print(ms.leak_verdict("heap")["verdict"])

if kind in ("pl-raise", "pl-nan"):
    import lightning.pytorch as pl
    from memscope.lightning import MemscopeCallback

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = model

        def training_step(self, batch, batch_idx):
            if kind == "pl-raise" and batch_idx == 3:
                raise Boom("diverged")
            loss = self.net(batch).square().mean()
            return loss * float("nan") if kind == "pl-nan" and batch_idx >= 2 else loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    loader = torch.utils.data.DataLoader(torch.randn(48, 16), batch_size=8)
    pl.Trainer(max_steps=6, accelerator="cpu", devices=1, logger=False,
               enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
               callbacks=[MemscopeCallback("run.json", warmup=0)]).fit(Module(), loader)

if kind == "hf-raise":
    from transformers import Trainer, TrainingArguments
    from memscope.hf import MemscopeCallback

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            return {"x": torch.randn(16), "labels": torch.randn(4)}

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
            self.calls = 0

        def forward(self, x, labels):
            self.calls += 1
            if self.calls == 4:
                raise Boom("diverged")
            return {"loss": (self.net(x) - labels).square().mean()}

    args = TrainingArguments("out", per_device_train_batch_size=4, max_steps=8, report_to=[],
                             use_cpu=True, logging_strategy="no", save_strategy="no")
    m = Model()
    cb = MemscopeCallback("run.json", warmup=0)
    Trainer(model=m, args=args, train_dataset=Data(), callbacks=[cb]).train()
