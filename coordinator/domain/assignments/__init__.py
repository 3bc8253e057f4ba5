"""The agent's side, decided: what it is told (assignment, entity tag, join material minted for
it) and what its reports and retries change."""
