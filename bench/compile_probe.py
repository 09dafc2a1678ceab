"""Probe: torch.compile (inductor, CPU) on SmolLM2-135M: prefill (bf16 weights, no grad) and one
training micro-batch (fp32 masters under bf16 autocast, last_layers:6, exact gradient). Fixed shapes."""
import sys, time, copy, json
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch
from rla_core.models.pretrained import resolve
from rla_core.models.precision import autocast
from rla_core.training import trainable
from transformers import AutoModelForCausalLM
torch.set_num_threads(2)
path = resolve("smollm2-135m-instruct")
out = {}
g = torch.Generator().manual_seed(0)

def timeit(fn, reps=3):
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return ts

# 1. prefill, bf16 model, hidden states only (the rollout's prefill runs the head at the last position)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(torch.bfloat16).eval()
ids = torch.randint(0, 49000, (32, 200), generator=g)
mask = torch.ones_like(ids)
def prefill(m):
    with torch.no_grad():
        return m.model(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
eager = timeit(lambda: prefill(model))
ref = prefill(model)
cm = torch.compile(model.model, dynamic=False)
class W: pass
w = W(); w.model = cm
t = time.perf_counter(); first = prefill(w); compile_s = time.perf_counter() - t
comp = timeit(lambda: prefill(w))
out["prefill_32x200"] = {"eager_s": eager, "compile_first_call_s": compile_s, "compiled_s": comp,
                         "max_abs_diff": float((first.float() - ref.float()).abs().max())}
print(json.dumps(out), flush=True)

# 2. training micro-batch: 16 x 210 tokens, loss on the last 30 positions
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
trainable.apply(model, "last_layers:6")
ids = torch.randint(0, 49000, (16, 210), generator=g)
def step(m):
    m.zero_grad(set_to_none=True)
    with autocast(torch.bfloat16, "cpu"):
        h = m.model(input_ids=ids, use_cache=False).last_hidden_state[:, -30:]
        logits = m.lm_head(h).float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, -30:].reshape(-1))
    loss.backward()
    return loss
eager = timeit(lambda: step(model))
cmodel = copy.deepcopy(model)
cmodel.model = torch.compile(cmodel.model, dynamic=False)
t = time.perf_counter(); step(cmodel); compile_s = time.perf_counter() - t
comp = timeit(lambda: step(cmodel))
out["train_16x210"] = {"eager_s": eager, "compile_first_call_s": compile_s, "compiled_s": comp}
print(json.dumps(out), flush=True)
