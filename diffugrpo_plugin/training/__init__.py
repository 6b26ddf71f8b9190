"""Training recipes beside the RL step: masked SFT, the default job's cached warm start, prompt curricula."""
