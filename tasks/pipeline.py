"""The run's recipe, the only lists of its stages: the start (iteration 0: what the loop starts from) and
one RL iteration, in order (docs/design.md, "The loop"). The flows run them (flows/train.py,
flows/rl_iteration.py); `rla reproduce` re-runs them (tasks/storage/rerun.py); routing, the summary table and a
routed stage's flow read them from here."""
from __future__ import annotations

from tasks.stages.commit import commit
from tasks.stages.evaluation import baseline, evaluate
from tasks.stages.iteration import adapt, data, judge, rollout, select
from tasks.stages.setup import bootstrap, init_models, seed
from tasks.stage import Stage
from tasks.stages.training import train_judge, train_policy
from tasks.stages.validate import validate

START_STAGES: tuple[Stage, ...] = (seed, init_models, bootstrap, baseline)
# validate raises on a failed gate (after logging its report), so no model is updated on bad data.
ITERATION: tuple[Stage, ...] = (select, rollout, judge, adapt, data, validate, train_policy, train_judge,
                                evaluate, commit)
