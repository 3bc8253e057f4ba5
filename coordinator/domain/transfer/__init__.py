"""Moving state: the backup archive's rules, the pivot's state machine and the target agents are
told to move to."""
