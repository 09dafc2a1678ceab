"""The control of docs/results.md's DAgger measurement (twenty-second session): from the 360-step checkpoint of
`rla bench policy-warmstart --run RUN --steps 360 --keep`, the same 60 steps as the DAgger round, with a fresh
optimizer, on the demonstrations only; scored on dev sampled and greedy as bench/policy_dagger.py scores.

    python bench/policy_control_s22.py RUN        # -> RUN/control-60/{policy,dev,result.json}
"""
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from policy_dagger import score_dev  # noqa: E402
from rla_core.config import load_config  # noqa: E402
from rla_core.models.factory import save_pretrained  # noqa: E402
from rla_core.training import trainable as trainable_weights  # noqa: E402
from tasks.common import bind_environment  # noqa: E402
from tasks.paths import RunPaths  # noqa: E402
from tasks.settings import setting_for  # noqa: E402
from tasks.settings.base import warm_start_role  # noqa: E402

run = Path(sys.argv[1]).resolve()
paths = RunPaths.of(run)
start = run / "bench_policy_warmstart/policy/step360"
out = run / "control-60"
cfg = load_config([paths.config], [])
bind_environment(cfg, run)
demos = setting_for(cfg).warm_start_pairs(paths, cfg, "policy")
began = time.perf_counter()
model, tokenizer, metrics = warm_start_role(paths, cfg, "policy", demos, 60, cfg.bootstrap.lr, start=start)
metrics["seconds"] = time.perf_counter() - began
save_pretrained(trainable_weights.merge(model), tokenizer, out / "policy")
del model
dev = score_dev(paths, run, [], out / "policy", out / "dev")
(out / "result.json").write_text(json.dumps({"round": metrics, "dev": dev}, indent=1) + "\n")
print(json.dumps({"round": metrics, "dev": dev}, indent=1))
