"""Shared test helpers: tiny models built in code, the offline MBPP copy, example packages, Ray."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
MBPP_DIR_VAR = "DIFFUGRPO_MBPP_DIR"
REQUIRE_ALL_VAR = "DIFFUGRPO_REQUIRE_ALL"
MINI_MBPP = REPO / "tests" / "fixtures" / "mini_mbpp.jsonl"
"""Eleven made-up problems in MBPP's schema (ours, not MBPP's), spread over its four task_id splits
(prompt 1 10, test 11 510, validation 511 555 600, train 601 700 800 974); 555 and 800 have
test_setup_code, 700's solution has MBPP's CRLF line ends and tabs. For the MBPP code paths on any clone."""
MINI_SANITIZED_MBPP = REPO / "tests" / "fixtures" / "mini_sanitized_mbpp.json"
"""Three made-up problems in the schema of MBPP's sanitized subset (a JSON array; 602 has test_imports)."""


def mbpp_file(name: str) -> Path:
    """A file of the offline MBPP copy in the folder DIFFUGRPO_MBPP_DIR names, read in place (never copied
    into the repo).

    Unset, the tests that need the real dataset are skipped, saying how to run them; set (CI sets it), a
    missing file fails the test.
    """
    folder = os.environ.get(MBPP_DIR_VAR)
    if not folder:
        pytest.skip(
            f"needs the MBPP dataset: {MBPP_DIR_VAR} is not set; point it at the folder holding "
            f"mbpp.jsonl and sanitized-mbpp.json to run this test"
        )
    path = Path(folder) / name
    if not path.is_file():
        pytest.fail(
            f"{MBPP_DIR_VAR}={folder}, but {path} does not exist; point {MBPP_DIR_VAR} at the folder "
            f"holding mbpp.jsonl and sanitized-mbpp.json, or unset it to skip the tests that need MBPP"
        )
    return path


def missing(what: str) -> NoReturn:
    """Skips a test that needs something this host lacks (bubblewrap, say), naming it and how to get it; fails
    it instead where DIFFUGRPO_REQUIRE_ALL is set (CI sets it: there every test must run)."""
    if os.environ.get(REQUIRE_ALL_VAR):
        pytest.fail(f"needs {what} ({REQUIRE_ALL_VAR} is set: every test must run here)")
    pytest.skip(f"needs {what}")


BWRAP_HINT = "bubblewrap, which runs the untrusted code: apt-get install -y bubblewrap"
ROOT_HINT = "root, setpriv and /usr/bin/python3: it switches to the 'nobody' user"
TOOLCHAINS_HINT = "g++, javac, java and node, which run the other languages' tests: apt-get install -y g++ default-jdk-headless nodejs"


def pytest_runtest_setup(item):
    """The markers of what a test needs (pyproject.toml): where the host lacks it, the test is :func:`missing` it."""
    if item.get_closest_marker("sandbox") and shutil.which("bwrap") is None:
        missing(BWRAP_HINT)
    if item.get_closest_marker("toolchains") and any(
        shutil.which(tool) is None for tool in ("g++", "javac", "java", "node")
    ):
        missing(TOOLCHAINS_HINT)
    if item.get_closest_marker("root") and (
        os.geteuid() != 0 or not os.path.exists("/usr/bin/python3") or shutil.which("setpriv") is None
    ):
        missing(ROOT_HINT)


SKIPPED_LIST_VAR = "DIFFUGRPO_SKIPPED_LIST"


def pytest_runtest_logreport(report):
    """Where DIFFUGRPO_SKIPPED_LIST names a file, each skipped test's id is appended to it: CI reruns just those
    with the MBPP copy and DIFFUGRPO_REQUIRE_ALL set, instead of the whole suite a second time."""
    listing = os.environ.get(SKIPPED_LIST_VAR)
    if listing and report.skipped and not hasattr(report, "wasxfail"):
        with open(listing, "a") as ids:
            ids.write(report.nodeid + "\n")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test that reaches the sandbox must say so with the ``sandbox`` marker, so that ``-m "not sandbox"`` leaves
    it out and a host without bubblewrap skips it: one that does not fails, saying so (a sandbox that fails where
    bubblewrap is installed fails the test as it is)."""
    from diffugrpo_plugin.sandbox.config import SandboxUnavailable

    try:
        return (yield)
    except SandboxUnavailable:
        if shutil.which("bwrap") is None and not item.get_closest_marker("sandbox"):
            pytest.fail("this test runs code in the sandbox: mark it @pytest.mark.sandbox")
        raise


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=300)


@contextmanager
def installed_example(folder: str, distribution: str, scratch: Path):
    """pip-install ``examples/<folder>`` (a third-party package) for the duration, then uninstall it.

    Plugin discovery is cached per process: check the installed package in a fresh subprocess.
    """
    source = scratch / folder
    shutil.copytree(REPO / "examples" / folder, source)  # the build writes egg-info beside the sources
    with installed_package(source, distribution):
        yield


@contextmanager
def installed_package(source: Path, distribution: str):
    """pip-install the package whose ``pyproject.toml`` is in ``source`` for the duration, then uninstall it."""
    done = pip("install", "--no-deps", "--no-build-isolation", "-q", str(source))
    assert done.returncode == 0, done.stderr
    try:
        yield
    finally:
        removed = pip("uninstall", "-y", "-q", distribution)
        assert removed.returncode == 0, removed.stderr


@contextmanager
def listed_plugins(monkeypatch, folder: Path, sources: dict[str, str], *entry_points):
    """Plugin modules written under ``folder`` (relative path -> source) and listed by ``entry_points`` (each an
    ``importlib.metadata.EntryPoint``) as if an installed package declared them, for the duration; discovery's
    per-process cache is cleared on the way in and out."""
    import importlib.metadata

    from diffugrpo_plugin import plugins

    for relative, source in sources.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(source)
    monkeypatch.syspath_prepend(str(folder))
    real = importlib.metadata.entry_points
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        lambda group: [
            *real(group=group),
            *(entry_point for entry_point in entry_points if entry_point.group == group),
        ],
    )
    plugins.plugin_manager.cache_clear()
    try:
        yield
    finally:
        plugins.plugin_manager.cache_clear()
        for relative in sources:
            name = relative.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            sys.modules.pop(name, None)


# The tiny test models spin with several threads on a loaded 2-core machine.
torch.set_num_threads(1)

VOCAB = 64
MASK_ID = 63


def build_tiny_module(style: str, vocab: int = VOCAB, seed: int = 0, tie: bool = False) -> torch.nn.Module:
    """A 2-layer bidirectional HF model: ``dream`` = Qwen2 (shifted logits), ``llada`` = Llama (unshifted)."""
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    config_cls, model_cls = (Qwen2Config, Qwen2ForCausalLM) if style == "dream" else (LlamaConfig, LlamaForCausalLM)
    config = config_cls(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=tie,
    )
    config.is_causal = False
    config.diffusion_logits_shift = style == "dream"
    config.mask_token_id = vocab - 1
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return model_cls(config).eval()


@pytest.fixture(params=["dream", "llada"])
def tiny_lm(request):
    from diffugrpo_plugin.models.dlm import DiffusionLM

    return DiffusionLM.wrap(build_tiny_module(request.param))


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    """A small Dream-style checkpoint with our tokenizer, saved once per test session."""
    from diffugrpo_plugin.models.tiny import TinySpec, save_tiny_model

    spec = TinySpec(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64)
    return str(save_tiny_model(tmp_path_factory.mktemp("tiny") / "dream", spec))


@pytest.fixture
def chosen_model(monkeypatch) -> list:
    """The paths a CLI command asks to load, recorded; loading stops there with a ModelConfigError (nothing
    is built: the warm-started model's path is only computed)."""
    from diffugrpo_plugin.models import dlm as models
    from diffugrpo_plugin.training import warm_start

    loaded = []

    def record(path, *args, **kwargs):
        loaded.append(path)
        raise models.ModelConfigError("stopped after choosing the model")

    monkeypatch.setattr(warm_start, "build_once", lambda target, build: target)
    monkeypatch.setattr(models, "load_diffusion_lm", record)
    return loaded


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray instance for every test that needs workers (start-up costs seconds)."""
    import os

    import ray

    # workers unpickle functions defined in test modules, so they need this folder on their path
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    python_path = os.pathsep.join(p for p in (tests_dir, os.environ.get("PYTHONPATH", "")) if p)
    ray.init(
        num_cpus=8,
        include_dashboard=False,
        log_to_driver=False,
        ignore_reinit_error=True,
        runtime_env={"env_vars": {"PYTHONPATH": python_path, "OMP_NUM_THREADS": "1"}},
    )
    yield
    ray.shutdown()
