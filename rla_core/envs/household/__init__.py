"""`household`: a procedural ALFWorld-like text game (rooms, receptacles, objects, goals).

Modules: catalog (vocabulary), spec (JSON schema + knobs), world (state, transitions, text),
oracle (exact shortest plans, progress labels), episode (the Episode protocol), generator (knobs ->
spec), rewriter (adjust from critic feedback), family (the EnvironmentFamily). Oracle demonstrations for
the warm-start are `rla_core.bootstrap.oracle_walk` (any environment family).
Importing this package registers the family under the name "household".
"""
from rla_core.envs.base import register_environment
from rla_core.envs.household.episode import HouseholdEpisode
from rla_core.envs.household.family import HOUSEHOLD, HouseholdFamily
from rla_core.envs.household.spec import DEFAULT_GOAL_TYPES, KNOB_BOUNDS, Knobs

register_environment(HOUSEHOLD)

__all__ = [
    "HOUSEHOLD", "HouseholdFamily", "HouseholdEpisode",
    "Knobs", "KNOB_BOUNDS", "DEFAULT_GOAL_TYPES",
]
