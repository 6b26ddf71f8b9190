"""``python -m diffugrpo_plugin.main`` (also reachable as ``python -m verl.trainer.main``).

Composes verl's ``ppo_trainer`` config with ``algorithm=coupled_grpo`` (the default), checks the
configuration for mistakes a user can fix before any Ray process starts, then runs verl's own
``main_ppo`` body: the same code ``python -m verl.trainer.main_ppo +algorithm=coupled_grpo`` runs.
"""

from __future__ import annotations

import sys

import hydra


@hydra.main(config_path="pkg://diffugrpo_plugin.config", config_name="diffugrpo", version_base=None)
def main(config) -> None:
    import verl  # noqa: F401  - loads our verl.plugins entry point
    from diffugrpo_plugin.integration import register
    from diffugrpo_plugin.integration.preflight import ConfigError, check_config
    from verl.trainer import main_ppo

    if register.registration_error is not None:
        raise SystemExit(f"diffugrpo could not register with verl: {register.registration_error!r}")
    try:
        check_config(config)
    except ConfigError as error:
        print(f"diffugrpo: configuration error: {error}", file=sys.stderr)
        raise SystemExit(2) from error
    main_ppo.main.__wrapped__(config)


if __name__ == "__main__":
    main()
