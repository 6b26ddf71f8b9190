"""What reaches ``ray.init`` from the default job's config: its own CPU and GPU counts where it starts a Ray head, none
where it joins a running cluster (Ray refuses them there: each node declared its own with ``ray start``)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_module

from diffugrpo_plugin.integration.platform import physical_cores, ray_logical_cpus


class _RayInitCalled(Exception):
    pass


def ray_init_kwargs(monkeypatch, *overrides: str) -> dict:
    """The keyword arguments verl's ``run_ppo`` passes to ``ray.init`` for the default job with ``overrides``."""
    import ray

    from verl.trainer import main_ppo

    seen = {}

    def init(**kwargs):
        seen.update(kwargs)
        raise _RayInitCalled

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with initialize_config_module(config_module="diffugrpo_plugin.config", version_base=None):
        config = compose(config_name="diffugrpo", overrides=["actor_rollout_ref.model.path=/unused", *overrides])
    with pytest.raises(_RayInitCalled):
        main_ppo.run_ppo(config, task_runner_class=None)
    return seen


@pytest.fixture
def no_cluster_here(monkeypatch, tmp_path):
    """No RAY_ADDRESS, and Ray's default temp dir (where ``ray start`` notes its cluster) is an empty one."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    return tmp_path / "ray"


def test_a_job_that_starts_ray_sizes_it(monkeypatch, no_cluster_here):
    kwargs = ray_init_kwargs(monkeypatch, "trainer.n_gpus_per_node=2")
    # this host is CPU-only (as the default suite's): 2 logical GPUs, one per trainer process, and CPUs for verl's
    # reservations (2 trainers, 1 storage unit, TransferQueue's controller, one to place the rest)
    assert kwargs["num_gpus"] == 2
    assert kwargs["num_cpus"] == ray_logical_cpus(physical_cores(), 2, 1) == max(physical_cores(), 5)
    assert kwargs["address"] is None


@pytest.mark.parametrize(
    "how",
    ["RAY_ADDRESS", "address in the config", "auto", "a cluster ray start left in the temp dir"],
)
def test_a_job_that_joins_a_running_cluster_passes_no_cpu_or_gpu_counts(monkeypatch, no_cluster_here, how):
    overrides = []
    if how == "RAY_ADDRESS":
        monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6391")
    elif how == "address in the config":
        overrides.append("ray_kwargs.ray_init.address=127.0.0.1:6391")
    elif how == "auto":  # no cluster to find: ray.init itself then says so
        overrides.append("ray_kwargs.ray_init.address=auto")
    else:
        no_cluster_here.mkdir()
        (no_cluster_here / "ray_current_cluster").write_text("127.0.0.1:6391")
    kwargs = ray_init_kwargs(monkeypatch, *overrides)
    assert kwargs["num_cpus"] is None and kwargs["num_gpus"] is None, kwargs
    assert kwargs["include_dashboard"] is False  # the rest as before


def test_an_address_named_local_starts_a_head(monkeypatch, no_cluster_here):
    kwargs = ray_init_kwargs(monkeypatch, "ray_kwargs.ray_init.address=local")
    assert kwargs["num_gpus"] == 1 and kwargs["num_cpus"] == ray_logical_cpus(physical_cores(), 1, 1)
