"""The rollout's ordering invariants (the planner), where each machine is within its phase, what
blocks it and what the operator can do."""
