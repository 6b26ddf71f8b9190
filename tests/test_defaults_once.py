"""Each default of the diffusion pass is written once (``diffugrpo_plugin/config/defaults.py``), and the sampler's
loop settings (``Plan``) are the sampler options' own: a second literal somewhere fails here, naming where."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from omegaconf import OmegaConf

from diffugrpo_plugin.config import ALGORITHM_CONFIG
from diffugrpo_plugin.config.defaults import DIFFUSION_DEFAULTS, DIFFUSION_KEYS, register_resolver
from diffugrpo_plugin.core.masking import DEFAULT_T_RANGE

PACKAGE = Path(__file__).resolve().parents[1] / "diffugrpo_plugin"
SCHEMA = PACKAGE / "config" / "defaults.py"


def literal_defaults(source: str, keys: frozenset[str]) -> list[str]:
    """Where ``source`` writes a default of one of ``keys`` again as a literal: ``x.get("key", literal)`` (any value:
    a config read with its own fallback repeats the schema or disagrees with it); the schema's value in a dataclass
    field ``key: ... = value`` or a parameter ``key=value`` (not a boolean one: ``generate(record_trace=False)`` is a
    function's "off unless asked", and other values are other settings, a probe's ``mask_seed=0``); or ``t_range``'s
    ``(0.2, 0.8)``."""
    found = []
    tree = ast.parse(source)
    definitions = {  # DEFAULT_T_RANGE = (0.2, 0.8) itself
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and [ast.unparse(target) for target in node.targets] == ["DEFAULT_T_RANGE"]
    }

    def is_literal(node) -> bool:
        try:
            ast.literal_eval(node)
        except ValueError:
            return False
        return True

    def is_default(key: str, node) -> bool:
        if not is_literal(node):
            return False
        value, default = ast.literal_eval(node), getattr(DIFFUSION_DEFAULTS, key)
        return type(value) is type(default) and value == default

    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in keys
            and is_literal(node.args[1])  # any value: a config read with its own fallback disagrees or repeats
        ):
            found.append(f"line {node.lineno}: .get({node.args[0].value!r}, {ast.unparse(node.args[1])})")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            positional = arguments.posonlyargs + arguments.args
            pairs = list(zip(positional[len(positional) - len(arguments.defaults) :], arguments.defaults))
            pairs += [(arg, default) for arg, default in zip(arguments.kwonlyargs, arguments.kw_defaults) if default]
            for arg, default in pairs:
                if (
                    arg.arg in keys
                    and type(getattr(DIFFUSION_DEFAULTS, arg.arg)) is not bool
                    and is_default(arg.arg, default)
                ):
                    found.append(f"line {node.lineno}: {node.name}({arg.arg}={ast.unparse(default)})")
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id in keys
            and node.value is not None
            and is_default(node.target.id, node.value)
        ):
            found.append(f"line {node.lineno}: {node.target.id} = {ast.unparse(node.value)}")
        if (
            isinstance(node, ast.Tuple)
            and id(node) not in definitions
            and is_literal(node)
            and ast.literal_eval(node) == DEFAULT_T_RANGE
        ):
            found.append(f"line {node.lineno}: t_range {ast.unparse(node)}")
    return found


def test_no_default_of_the_diffusion_pass_is_written_twice():
    written = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == SCHEMA:
            continue
        found = literal_defaults(path.read_text(), DIFFUSION_KEYS)
        if found:
            written[str(path.relative_to(PACKAGE))] = found
    assert not written, (
        f"read these from config.defaults.DIFFUSION_DEFAULTS (or core.masking.DEFAULT_T_RANGE): {written}"
    )


def test_the_scan_finds_each_way_a_default_is_written_again():
    source = (
        "def f(settings, chunk_rows=1024, mask_seed=0, record_trace=False):\n"
        "    return settings.get('mask_seed', 7)\n"
        "class Options:\n"
        "    lean_mlp: bool = True\n"
        "def g(t_range=(0.2, 0.8)):\n"
        "    return settings.get('chunk_rows', DIFFUSION_DEFAULTS.chunk_rows)\n"
        "DEFAULT_T_RANGE = (0.2, 0.8)\n"
    )
    found = literal_defaults(source, DIFFUSION_KEYS)
    assert sorted(where.split(":")[0] for where in found) == ["line 1", "line 2", "line 4", "line 5"], found


def test_the_packaged_config_reads_every_default_from_the_schema():
    text = ALGORITHM_CONFIG.read_text()
    register_resolver()
    diffusion = OmegaConf.to_container(OmegaConf.load(ALGORITHM_CONFIG).actor_rollout_ref.model.diffusion, resolve=True)
    for key in DIFFUSION_KEYS:
        assert f"{key}: ${{diffugrpo.default:{key}}}" in text, f"{key} is written in {ALGORITHM_CONFIG.name}"
        assert diffusion[key] == getattr(DIFFUSION_DEFAULTS, key)
    assert diffusion["chunk_rows"] == 1024 and diffusion["masker"] == "coupled"  # DiffuCoder's masker; the H100 runs'


def test_the_loop_plan_is_the_sampler_options_own():
    from diffugrpo_plugin.sampling.denoising import Plan
    from diffugrpo_plugin.sampling.samplers import DreamSampler, LLaDASampler

    for sampler in (
        DreamSampler(steps=8, kv_cache=True, cache_refresh=2, threshold=0.9),
        LLaDASampler(block_length=4, compact=True),
    ):
        plan = sampler._plan(cfg_scale=0.5)
        for field in dataclasses.fields(Plan):
            expected = 0.5 if field.name == "cfg_scale" else getattr(sampler, field.name)
            assert getattr(plan, field.name) == expected, field.name
    assert all(field.default is dataclasses.MISSING for field in dataclasses.fields(Plan))  # no second default
