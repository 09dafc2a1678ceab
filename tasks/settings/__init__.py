"""The settings a run can train in, side by side: one `Setting` per kind of task, chosen by
`environment.name` through one registry (tasks/settings/base.py).

  episodic  multi-turn text games with step verdicts: the household game and TextWorld (any environment
            family registered in rla_core/envs/, whatever its name, unless a setting claims the name)
  coding    single-turn programs run in the sandbox, unit tests from the judge (environment.name = coding)

The stages (tasks/stages/setup.py, tasks/stages/iteration.py, tasks/stages/evaluation.py) call the run's setting and never
branch on its name; a new setting is one module here plus one line in `REGISTRY` (docs/extending.md).
"""
from tasks.settings.base import REGISTRY, Setting, register, setting_for

__all__ = ["REGISTRY", "Setting", "register", "setting_for"]
