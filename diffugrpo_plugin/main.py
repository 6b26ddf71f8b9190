"""``python -m diffugrpo_plugin.main`` (also reachable as ``python -m verl.trainer.main``).

Composes verl's ``ppo_trainer`` config with ``algorithm=coupled_grpo`` and ``job=cpu_demo`` (the defaults), checks the
configuration for mistakes a user can fix before any Ray process starts, then runs verl's own
``main_ppo`` body: the same code ``python -m verl.trainer.main_ppo +algorithm=coupled_grpo +job=cpu_demo`` runs, with
verl's trainer loop in this process rather than in an actor of its own under the lean process layout (the default for a
one-node CPU job; :mod:`.integration.layout`).
The terminal shows a progress bar and one line per step; the rest goes to ``train.log`` in the
Hydra output directory unless ``diffugrpo.verbose=true`` (:mod:`.integration.console`).
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig


@hydra.main(config_path="pkg://diffugrpo_plugin.config", config_name="diffugrpo", version_base=None)
def main(config) -> None:
    import verl  # noqa: F401  - loads our verl.plugins entry point, which reports a failure with its traceback

    try:
        # a failed registration left no module behind, so this import runs it again and raises its error
        from diffugrpo_plugin.integration import register  # noqa: F401
    except Exception as error:  # noqa: BLE001 - any failure of the registration stops here, in one line
        print(
            f"diffugrpo: could not register with verl ({type(error).__name__}: {error}); the traceback above shows "
            f"where",
            file=sys.stderr,
        )
        raise SystemExit(2) from error
    from diffugrpo_plugin.integration.platform import size_ray_workers
    from diffugrpo_plugin.integration.preflight import ConfigError, check_config

    try:
        check_config(config)
        size_ray_workers(config)
    except ConfigError as error:
        print(f"diffugrpo: configuration error: {error}", file=sys.stderr)
        raise SystemExit(2) from error
    from diffugrpo_plugin.integration.cluster import ClusterTooSmall, JobProcessLost
    from diffugrpo_plugin.integration.console import run_quietly
    from diffugrpo_plugin.integration.layout import run_training

    try:
        run_quietly(config, run_training, HydraConfig.get().runtime.output_dir)
    except (JobProcessLost, ClusterTooSmall) as error:  # a lost process's Ray error and traceback are in the log
        # raised in verl's task-runner actor, the error arrives as Ray's task error, the original its cause
        print(f"diffugrpo: {getattr(error, 'cause', None) or error}", file=sys.stderr)
        raise SystemExit(1) from error


if __name__ == "__main__":
    main()
