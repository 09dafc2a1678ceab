"""Dev-only A/B of train.stop_gradient on a coding run's policy warm start: the same initial weights, pairs,
seed, steps and lr as its bootstrap, once with the gradient stopped below the trained blocks and once exact;
dev pass@1 of each (eval.dev_episodes_per_task sampled programs per dev problem, and greedy; one sampling
seed for every arm). Held-out problems are never read.

    .venv/bin/python bench/warmstart_gradient_ab.py RUN SEED [OUT]

RUN: a coding run folder with its seed and init stages and a dev split (e.g. a SmolLM2 coding run);
SEED: run.seed of the warm start (the demonstration problems and batch order follow it)."""
import json, sys, time, shutil
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout
from pathlib import Path
from rla_core.config import load_config
from rla_core.models.factory import save_pretrained
from rla_core.training import trainable as trainable_weights
from rla_core.envs.coding import rewards as coding_rewards
from rla_core.schemas import Task
from tasks.paths import RunPaths
from tasks.settings.base import warm_start_role
from tasks.settings.coding import demo_problems, programs_for
from rla_core.envs.coding.bootstrap import policy_pairs
from tasks.storage.files import read_records

src = RunPaths.of(sys.argv[1])
seed = int(sys.argv[2])
out = Path(sys.argv[3] if len(sys.argv) > 3 else "runs/warmstart-gradient-ab") / f"seed{seed}"
out.mkdir(parents=True, exist_ok=True)
results = {}
for sg in (True, False):
    cfg = load_config([src.config], [f"train.stop_gradient={str(sg).lower()}", f"run.seed={seed}"])
    demos = demo_problems(cfg, src, cfg.bootstrap.demos, "demos")
    t = time.perf_counter()
    model, tok, metrics = warm_start_role(src, cfg, "policy", policy_pairs(demos), cfg.bootstrap.policy_steps, cfg.bootstrap.lr)
    secs = time.perf_counter() - t
    target = out / f"policy-sg{int(sg)}"
    save_pretrained(trainable_weights.merge(model), tok, target)
    dev = read_records(src.dev, Task)
    _, runs = programs_for(src, cfg, dev, target, cfg.eval.dev_episodes_per_task, cfg.eval.temperature, 1234, "dev")
    _, greedy = programs_for(src, cfg, dev, target, 1, 0.0, 1234, "dev greedy")
    results[f"stop_gradient={sg}"] = {"train_s": secs, "loss_last": metrics.get("loss_last"),
        "dev_pass_at_1": coding_rewards.outcome_metrics(runs)["pass_at_1"],
        "dev_greedy_pass_at_1": coding_rewards.outcome_metrics(greedy)["pass_at_1"]}
    print(json.dumps(results), flush=True)
    shutil.rmtree(target)
(out / "result.json").write_text(json.dumps(results, indent=1))
