"""What a person reads: the parent run's overview (overview), the trajectory viewer (trajectories), the
ablation table (ablation) and `rla eval --games` (game_eval)."""
