"""Hydra search-path plugin: puts diffugrpo's config groups on every Hydra app's search path.

With it, verl's own entry point accepts our algorithm and job groups:
``python -m verl.trainer.main_ppo +algorithm=coupled_grpo +job=cpu_demo``.
"""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class DiffuGRPOSearchPathPlugin(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="diffugrpo", path="pkg://diffugrpo_plugin.config")
