"""``diffugrpo sandbox check``: the protections table, the self-test, and the exit code."""

from __future__ import annotations

import pytest

from diffugrpo_plugin.cli import main
from diffugrpo_plugin.sandbox import languages
from diffugrpo_plugin.sandbox import limits as sandbox_limits


@pytest.mark.sandbox
@pytest.mark.toolchains
def test_check_lists_every_protection_and_passes_its_self_test(capsys):
    assert main(["sandbox", "check", "--timeout-s", "2"]) == 0
    out = capsys.readouterr().out
    for name in sandbox_limits.PROTECTION_NAMES:
        assert name in out
    assert out.count("  ok      ") == 7 + 3 and "isolation is as configured" in out
    for language in ("cpp", "java", "javascript"):
        assert f"ok      {language}: a program reading stdin passes (PASSED)" in out


@pytest.mark.sandbox
def test_check_names_the_package_of_a_missing_toolchain_without_failing(capsys, monkeypatch):
    real = languages.resolved_tool
    monkeypatch.setattr(
        languages, "resolved_tool", lambda tool: None if tool in ("g++", "javac", "java", "node") else real(tool)
    )
    assert main(["sandbox", "check", "--timeout-s", "2"]) == 0
    out = capsys.readouterr().out
    assert "javascript: not installed (node): apt-get install -y nodejs" in out
    assert "java: not installed (javac, java): apt-get install -y default-jdk-headless" in out


@pytest.mark.sandbox
def test_check_fails_when_a_required_protection_is_missing(capsys, monkeypatch):
    monkeypatch.setattr(sandbox_limits, "seccomp_program", lambda: (None, "libseccomp missing (simulated)"))
    assert main(["sandbox", "check", "--require", "namespaces", "seccomp"]) == 1
    out = capsys.readouterr().out
    assert "libseccomp missing (simulated)" in out and "required but not active: seccomp" in out


def test_check_names_an_unknown_protection(capsys):
    assert main(["sandbox", "check", "--require", "firewall"]) == 2
    assert "unknown protection(s) ['firewall']" in capsys.readouterr().err
