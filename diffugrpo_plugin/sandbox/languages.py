"""The languages the sandbox runs besides Python: how a program is written to a file, compiled and run.

Python runs inside the launcher's own forked interpreter (``sandbox_launcher``), its tests decided by the
judge. Every other language is a toolchain from the host's ``/usr`` (a Debian package each: see
:data:`LANGUAGES`), run in the same sandbox as a Python job: the same namespaces, seccomp filter, cgroup,
uid and rlimits (inherited across ``execve``), the same deadlines. A program is compiled once per
completion (one job with its own CPU limit, ``SandboxConfig.compile_timeout_s``); each test then runs the
result in a fresh process. Its tests are stdin/stdout pairs (compared outside the sandbox, like Python's)
or the task's in-language assertions compiled into the program (MultiPL-E's form), whose verdict is the
process's exit status: decided inside the program's own process, so the outcomes say so
(``TestOutcome.judged_inside``).

Standard library only. No torch.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass

SOURCE_PLACEHOLDER = "{source}"
MAIN_CLASS_PLACEHOLDER = "{main_class}"
# What competitive-programming judges compile C++ with (Codeforces' "GNU G++20"): GNU C++20, and ONLINE_JUDGE
# defined, which submissions test to skip their local freopen("input.txt") set-up.
CPP_STANDARD = "gnu++20"
CPP_FLAGS = (f"-std={CPP_STANDARD}", "-O2", "-pipe", "-DONLINE_JUDGE")
# The JVM reserves its heap, code cache and class space as address space up front: it does not start under
# 1 GiB of RLIMIT_AS. Its heap is capped by -Xmx instead (the cgroup, where there is one, caps it all).
JVM_ADDRESS_SPACE_MB = 4096
# A compiler's address space (virtual; the cgroup, where there is one, caps what it keeps resident at memory_mb):
# g++ parsing <bits/stdc++.h> maps more than a small memory_mb would allow.
COMPILER_ADDRESS_SPACE_MB = 2048
JVM_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss64m", "-XX:ReservedCodeCacheSize=64m")


@dataclass(frozen=True)
class Language:
    """One language the code rewards judge.

    ``fences``: the info strings that open its fenced block (the first is the one prompts show);
    ``compile`` / ``run``: argv templates (``{source}``: the source file, ``{main_class}``: Java's class to run);
    ``tools``: the host executables both need; ``package``: the Debian package that provides them, for the
    error that says what to install; ``ro_binds``: host paths outside ``/usr`` the toolchain reads;
    ``address_space_mb``: at least this much address space for its processes (see :data:`JVM_ADDRESS_SPACE_MB`).
    """

    name: str
    fences: tuple[str, ...]
    source_name: str
    compile: tuple[str, ...] = ()
    run: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    package: str = ""
    ro_binds: tuple[str, ...] = ()
    address_space_mb: int = 0

    def source_file(self, code: str) -> str:
        """The file the program is written to. Java needs a public class in a file of its name."""
        if self.name == "java":
            public = java_public_class(code)
            if public:
                return f"{public}.java"
        return self.source_name

    def missing_tools(self) -> list[str]:
        """The executables this host lacks for this language."""
        return [tool for tool in self.tools if resolved_tool(tool) is None]


_JAVA_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_JAVA_TYPE = re.compile(r"\b(?:class|record|enum|interface)\s+([A-Za-z_$][\w$]*)")
_JAVA_MAIN = re.compile(r"\bstatic\b[^;{}=]*\bvoid\s+main\s*\(")
_JAVA_PACKAGE = re.compile(r"^\s*package\s+([\w.]+)\s*;", re.M)


def _java_top_level(code: str) -> list[tuple[str, bool, str]]:
    """The program's top-level types, in order: name, whether it is public, its body (comments and literals
    blanked: they hold no braces or declarations that count)."""
    text = _JAVA_NOISE.sub(lambda found: " " * len(found.group(0)), code)
    depth, types, start = 0, [], 0
    opened: tuple[str, bool, int] | None = None
    for at, char in enumerate(text):
        if char == "{":
            if depth == 0:
                declared = list(_JAVA_TYPE.finditer(text, start, at))
                head = text[start : declared[-1].start()] if declared else ""
                opened = (declared[-1].group(1), bool(re.search(r"\bpublic\b", head)), at) if declared else None
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                if opened:
                    types.append((opened[0], opened[1], text[opened[2] : at]))
                opened, start = None, at + 1
    return types


def java_public_class(code: str) -> str | None:
    """The program's public top-level class, which javac wants in a file of its name; None if it has none."""
    return next((name for name, public, _ in _java_top_level(code) if public), None)


def java_main_class(code: str) -> str:
    """The class a Java program runs, as ``java`` names it: the top-level type that declares ``static void main``
    (else its public class, else its first top-level type), qualified by its package. A wrong guess fails the
    program's tests, nothing else."""
    types = _java_top_level(code)
    with_main = [name for name, _, body in types if _JAVA_MAIN.search(body)]
    public = [name for name, is_public, _ in types if is_public]
    name = (with_main or public or [name for name, _, _ in types] or ["Main"])[0]
    package = _JAVA_PACKAGE.search(_JAVA_NOISE.sub(" ", code))
    return f"{package.group(1)}.{name}" if package else name


def resolved_tool(tool: str) -> str | None:
    """The real path of a tool on the host's ``PATH`` (``/etc/alternatives`` links resolved: the sandbox
    binds ``/usr`` but not ``/etc``), or None."""
    found = shutil.which(tool, path="/usr/local/bin:/usr/bin:/bin")
    return os.path.realpath(found) if found else None


LANGUAGES: dict[str, Language] = {
    "python": Language("python", ("python", "python3", "py"), "solution.py"),
    "cpp": Language(
        "cpp",
        ("cpp", "c++"),
        "solution.cpp",
        compile=("g++", *CPP_FLAGS, "-o", "solution", SOURCE_PLACEHOLDER),
        run=("./solution",),
        tools=("g++",),
        package="g++",
    ),
    "java": Language(
        "java",
        ("java",),
        "Main.java",
        compile=(
            "javac",
            *(f"-J{flag}" for flag in JVM_FLAGS),
            "-J-Xmx512m",
            "-encoding",
            "UTF-8",
            "-nowarn",
            "-proc:none",
            "-d",
            "classes",
            SOURCE_PLACEHOLDER,
        ),
        run=("java", *JVM_FLAGS, "-Xmx512m", "-ea", "-cp", "classes", MAIN_CLASS_PLACEHOLDER),
        tools=("javac", "java"),
        package="default-jdk-headless",
        ro_binds=("/etc/java-17-openjdk", "/etc/java-21-openjdk"),  # Debian's JDK reads its conf/ there
        address_space_mb=JVM_ADDRESS_SPACE_MB,
    ),
    "javascript": Language(
        "javascript",
        ("javascript", "js"),
        "solution.js",
        run=("node", SOURCE_PLACEHOLDER),
        tools=("node",),
        package="nodejs",
    ),
}
ALIASES = {"python3": "python", "py": "python", "c++": "cpp", "js": "javascript", "node": "javascript"}


def language(name: object) -> Language:
    """The language called ``name`` (an alias such as ``js`` or ``c++`` too); ValueError naming the choices."""
    key = str(name).strip().lower() if isinstance(name, str) else None
    key = ALIASES.get(key, key)
    if key not in LANGUAGES:
        raise ValueError(f"column 'language': unknown language {name!r}; choose one of {sorted(LANGUAGES)}")
    return LANGUAGES[key]


def toolchain_binds() -> list[str]:
    """The host paths outside ``/usr`` that the installed toolchains read, bound read-only in every sandbox."""
    return sorted({path for lang in LANGUAGES.values() for path in lang.ro_binds if os.path.isdir(path)})
