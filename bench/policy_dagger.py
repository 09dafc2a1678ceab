"""One DAgger round on a warm-started game policy, scored on the DEV split: the policy checkpoint plays
fresh tasks, every state it visited is labelled with the oracle's command, and it trains
bootstrap.policy_dagger_steps more steps on its demonstrations plus those pairs, exactly as `bootstrap` does
with bootstrap.policy_dagger_tasks (tasks/settings/episodic.py: dagger_round). The new checkpoint, and with
--score-start the starting one, are scored on the dev tasks sampled (as an evaluation plays them) and greedy.
Held-out tasks are never read.

    python bench/policy_dagger.py --run RUN --policy DIR --tasks 200 --steps 60 --out-dir DIR \
        [--temperature 0] [--score-start [greedy]] [--set KEY=VALUE] [--out JSON]

--tasks 0 is the control: the same --steps from the same checkpoint, a fresh optimizer, the demonstrations only.

RUN: a run folder past its seed stage with a dev split (e.g. the folder of `rla bench policy-warmstart`);
DIR: the policy checkpoint the round starts from (e.g. RUN/bench_policy_warmstart/policy/step360).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def score_dev(paths, run: Path, overrides: list[str], policy: Path, out: Path,
              kinds: tuple[str, ...] = ("sampled", "greedy")) -> dict[str, float]:
    """Dev success of one policy, sampled (eval.temperature, eval.dev_episodes_per_task) and greedy (one episode
    a task); the episodes go to out/{sampled,greedy}/dev_trajectories.jsonl."""
    from rla_core.config import load_config
    from tasks.common import bind_environment, eval_seed
    from tasks.settings import setting_for

    scores: dict[str, float] = {}
    for name, sets in (("sampled", []), ("greedy", ["eval.temperature=0", "eval.dev_episodes_per_task=1"])):
        if name not in kinds:
            continue
        cfg = load_config([paths.config], overrides + sets)
        bind_environment(cfg, run)
        began = time.perf_counter()
        got = setting_for(cfg).dev_policy_scores(paths, cfg, policy, out / name, eval_seed(cfg))
        scores.update({f"{name}/{k}": v for k, v in got.items()})
        scores[f"{name}/seconds"] = time.perf_counter() - began
    return scores


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="run folder past its seed stage, with a dev split")
    parser.add_argument("--policy", required=True, help="the policy checkpoint the round starts from")
    parser.add_argument("--tasks", type=int, required=True, help="fresh tasks the policy plays (policy_dagger_tasks); "
                        "0: the control, --steps more steps on the demonstrations only")
    parser.add_argument("--steps", type=int, required=True, help="optimizer steps of the round (policy_dagger_steps)")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature of its episodes")
    parser.add_argument("--score-start", nargs="?", const="both", choices=("both", "greedy"), default=None,
                        help="also score the starting checkpoint on dev: sampled and greedy (both), or greedy only "
                        "(its sampled dev score is the warm-start bench's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="change the run's config")
    parser.add_argument("--out-dir", required=True, help="folder for the new checkpoint and the dev episodes")
    parser.add_argument("--out", default=None, help="JSON result (default OUT_DIR/result.json)")
    args = parser.parse_args(argv)

    from rla_core.config import load_config
    from rla_core.errors import BadValue, MissingFile
    from rla_core.models.factory import save_pretrained
    from rla_core.training import trainable as trainable_weights
    from tasks.common import bind_environment
    from tasks.paths import RunPaths
    from tasks.settings import setting_for
    from tasks.settings.base import warm_start_role
    from tasks.settings.episodic import dagger_round

    run = Path(args.run).resolve()
    paths = RunPaths.of(run)
    policy = Path(args.policy).resolve()
    for need in (paths.config, paths.dev, policy / "config.json"):
        if not need.is_file():
            raise MissingFile(f"{need} is missing: give a run folder past its seed stage with a dev split "
                              "(eval.dev_file) and a policy checkpoint")
    if args.tasks < 0 or args.steps <= 0:
        raise BadValue(f"--tasks must be >= 0 and --steps > 0, got {args.tasks} and {args.steps}")
    out = Path(args.out_dir).resolve()
    if out == policy or policy in out.parents:
        raise BadValue(f"--out-dir {out} is inside the starting checkpoint; give another folder")
    round_keys = [f"bootstrap.policy_dagger_tasks={args.tasks}", f"bootstrap.policy_dagger_steps={args.steps}",
                  f"bootstrap.policy_dagger_temperature={args.temperature}"] if args.tasks else []
    cfg = load_config([paths.config], [*args.set, *round_keys])
    setting = setting_for(cfg)
    if not setting.episodic:
        raise BadValue("the DAgger round is for the games (household, TextWorld); coding problems are one turn")
    bind_environment(cfg, run)
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"run": str(run), "start": str(policy), "tasks": args.tasks, "steps": args.steps,
                    "temperature": args.temperature, "overrides": args.set}
    if args.score_start:
        kinds = ("sampled", "greedy") if args.score_start == "both" else ("greedy",)
        result["start_dev"] = score_dev(paths, run, args.set, policy, out / "start", kinds)
        print(json.dumps({"start_dev": result["start_dev"]}, indent=1), flush=True)
    demos = setting.warm_start_pairs(paths, cfg, "policy")
    if args.tasks:
        model, tokenizer, metrics = dagger_round(cfg, paths, demos, policy)
    else:  # the control: the same steps from the same checkpoint, fresh optimizer, on the demonstrations only
        began = time.perf_counter()
        model, tokenizer, metrics = warm_start_role(paths, cfg, "policy", demos, args.steps, cfg.bootstrap.lr,
                                                    start=policy)
        metrics["seconds"] = time.perf_counter() - began
    save_pretrained(trainable_weights.merge(model), tokenizer, out / "policy")
    del model
    result["round"] = {**metrics, "demo_pairs": float(len(demos))}
    print(json.dumps({"round": result["round"]}, indent=1), flush=True)
    result["dev"] = score_dev(paths, run, args.set, out / "policy", out / "dev")
    target = Path(args.out) if args.out else out / "result.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"dev": result["dev"]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
