"""coordinator: the control side; holds clusters and machines and plans their rollout."""
