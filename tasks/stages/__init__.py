"""The stages' bodies: the run's start (setup, evaluation's baseline), one RL iteration (iteration,
validate, training, evaluation, commit), and what they call that is not a setting's (engines, rewriting,
the fixed evaluation data)."""
