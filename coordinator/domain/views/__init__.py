"""What the operator is shown: rollout status, the machine list's rules, what each machine would
run."""
