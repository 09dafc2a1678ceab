"""`textworld`: games made and played by TextWorld (Microsoft's text-game engine, under ALFWorld).

Modules: spec (the JSON task spec), games (building, verifying and the content-addressed game cache),
episode (the Episode protocol over the engine, with the engine's winning policy as oracle), rewriter
(regenerate a game with a knob chosen from critic feedback), family (the EnvironmentFamily).
Importing this package registers the family under the name "textworld".
"""
from rla_core.envs.base import register_environment
from rla_core.envs.textworld.episode import TextWorldEpisode
from rla_core.envs.textworld.family import TEXTWORLD, TextWorldFamily

register_environment(TEXTWORLD)

__all__ = ["TEXTWORLD", "TextWorldFamily", "TextWorldEpisode"]
