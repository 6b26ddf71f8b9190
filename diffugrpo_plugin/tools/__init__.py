"""What the CLI runs beside training: pass@k evaluation, ``check-model``, the step cost model, run plots."""
