"""How another language's program and its tests become the files the sandbox compiles and the commands it runs.

A program judged on its output (stdin/stdout tests) is its file and the language's own commands
(``sandbox/languages.py``). In-language tests (MultiPL-E's form, ``test``) share the program's process, so their
verdict is the program's word (``TestOutcome.judged_inside``). This harness keeps the tests out of the program's
reach as far as one process allows:

* **The tests must run to their end.** A runner calls them and then prints a marker, a random line fresh for
  every run that is in no file as text (stored masked); the verdict needs the marker and exit status 0, so a
  program that ends the process early with success (``exit(0)``, ``System.exit(0)`` in a static initialiser,
  ``process.exit(0)``) fails.
* **The tests are compiled apart from the program, and no file they came from is left to read.**

  - C++: program and tests are two translation units, so the program's macros, ``using namespace std`` and
    operator overloads never reach the tests (which declare the function they call). The program's object
    file keeps as global only the functions the tests call (``objcopy --keep-global-symbols``) and its weak
    copies of inline code the tests define too (the tests' copy wins: it is linked first): it cannot replace
    ``memcmp``, ``__assert_fail``, ``operator new``, a template's instance or any other symbol the tests use. A program's own
    ``main`` is renamed. The tests' ``assert`` traps the CPU (no library call to replace). The sources are
    deleted after compiling and the executable is left unreadable.
  - Java: the tests are their own compilation unit, calling ``Problem.name(...)`` (no inheritance: a
    program's nested or inherited names do not reach them), with single-type imports of every library type
    they name (a program's own ``ArrayList`` or ``Objects`` class does not shadow them). The runner loads the
    tests' class, deletes its class file and its own, and only then runs them; sources are deleted after
    compiling.
  - JavaScript: the runner reads program and tests, deletes both files and itself, runs the program as a
    script and the tests as a separate strict function given the ``node:assert`` it froze before the program
    ran (a program that replaces ``require``, ``test`` or ``Module._load``, or reads a caller's source, changes
    nothing the tests see); ``inspector``, ``v8``, ``vm`` and ``module`` are not available to the program, nor
    ``process.binding``; a ``SIGUSR1`` does not open the inspector.

What stays possible, and is why these verdicts are flagged rather than trusted: a program reading its own
process's memory (``/proc/self/mem``) for the marker or for the tests' expected values, a Java object whose
``equals`` answers true where the tests call it on the program's object (the data prep asks the expected value's
``equals`` for ``actual.equals(expected)``), or a JavaScript program that reaches node's inspector another way.
Tests judged outside the process (stdin/stdout pairs) have none of these weaknesses. No torch.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
import secrets
import shlex
import subprocess
from dataclasses import dataclass

from diffugrpo_plugin.data.cache import build_once, diffugrpo_home
from diffugrpo_plugin.sandbox.languages import (
    MAIN_CLASS_PLACEHOLDER,
    SOURCE_PLACEHOLDER,
    Language,
    java_main_class,
    resolved_tool,
)

logger = logging.getLogger("diffugrpo.rewards")

MARKER_BYTES = 16
CPP_FLAGS = "-std=c++17 -O2 -pipe"
STDCPP = "bits/stdc++.h"
CPP_TESTS_FUNCTION = "diffugrpo_tests_main"
JAVA_TESTS_CLASS = "ProblemTests"
JAVA_RUNNER_CLASS = "DiffugrpoTestsRunner"
JS_TESTS_FILE = "tests.js"
JS_RUNNER_FILE = "diffugrpo_runner.js"
SHELL = "/bin/sh"
_CPP_MAIN = re.compile(r"\bint\s+main\s*\(\s*(?:void)?\s*\)")
_CPP_DECLARED = re.compile(r"^[^#/\n][^;{}()\n]*?\b([A-Za-z_]\w*)\s*\([^;{}()\n]*\)\s*;[ \t]*$", re.M)
_CPP_TYPE_TEXT = r"[\w:<>,*&\[\] \t]"  # a declaration's return or parameter types: no parentheses, no expressions
# The standard library's type names a program may write unqualified after `using namespace std;` (the tests'
# translation unit has no such directive: its declaration spells them out).
_CPP_STD_TYPES = re.compile(
    r"(?<![\w:])(vector|string|map|unordered_map|set|unordered_set|multiset|multimap|tuple|optional|pair|deque|"
    r"list|array|any|variant|function|less|greater|hash|allocator)\b"
)
_CPP_NOT_LINKABLE = re.compile(r"\b(?:static|consteval|template|extern|__attribute__)\b")
_CPP_INLINE = re.compile(r"\b(?:inline|constexpr)\b")  # linkable once its address is taken in its own unit
# The library types a Java test may name, imported one by one so that a program's class of the same name in the
# same (default) package does not take their place.
JAVA_TYPES = {
    "java.util": (
        "ArrayList",
        "Arrays",
        "HashMap",
        "HashSet",
        "LinkedList",
        "List",
        "Map",
        "Objects",
        "Optional",
        "Set",
        "TreeMap",
        "TreeSet",
    ),
    "java.lang": (
        "AssertionError",
        "Boolean",
        "Character",
        "Class",
        "ClassLoader",
        "Double",
        "Float",
        "Integer",
        "Long",
        "Math",
        "Object",
        "Runtime",
        "String",
        "System",
        "Throwable",
    ),
    "java.io": ("File",),
    "java.lang.reflect": ("InvocationTargetException", "Method"),
}
JS_HIDDEN_MODULES = ("inspector", "inspector/promises", "v8", "vm", "module", "repl")


@dataclass(frozen=True)
class Harness:
    """The files of one program (name, content), the command that compiles them (None: interpreted), the command
    that runs each test, and the line the runner prints once the tests ran to their end (None: stdin/stdout)."""

    files: tuple[tuple[str, str], ...]
    compile: tuple[str, ...] | None
    run: tuple[str, ...]
    marker: str | None = None
    ro_binds: tuple[str, ...] = ()  # host folders of trusted files the compile reads (the precompiled header)


def _joined(*parts: str) -> str:
    return "\n".join(part.rstrip("\n") for part in parts if part) + "\n"


def _command(template: tuple[str, ...], source: str, main_class: str = "") -> list[str]:
    """A language's command with its placeholders filled and its tool resolved to the host's real path (the
    sandbox binds ``/usr``, not ``/etc/alternatives``)."""
    argv = [part.replace(SOURCE_PLACEHOLDER, source).replace(MAIN_CLASS_PLACEHOLDER, main_class) for part in template]
    if not argv[0].startswith("./"):
        argv[0] = resolved_tool(argv[0]) or argv[0]
    return argv


def _script(*lines: str) -> tuple[str, ...]:
    """A shell script run as the compile job (``set -e``: the first failing step fails the compile)."""
    return (SHELL, "-c", "\n".join(["set -e", *lines]))


def program_harness(language: Language, prelude: str, code: str) -> Harness:
    """A program judged on its output (stdin/stdout tests): the prelude, then the program, compiled and run by the
    language's own commands."""
    source = _joined(prelude, code)
    name = language.source_file(source)
    main_class = java_main_class(source)
    compile_command = tuple(_command(language.compile, name, main_class)) if language.compile else None
    return Harness(((name, source),), compile_command, tuple(_command(language.run, name, main_class)))


def tests_harness(language: Language, prelude: str, code: str, tests: str) -> Harness:
    """A program with its in-language tests and a runner that prints a fresh marker once they pass (see the
    module docstring). ValueError when ``tests`` do not have the form the language's runner needs."""
    marker = secrets.token_hex(MARKER_BYTES)
    mask = secrets.token_bytes(len(marker))
    masked = bytes(char ^ key for char, key in zip(marker.encode(), mask))
    build = {"cpp": _cpp, "java": _java, "javascript": _javascript}.get(language.name)
    if build is None:
        raise ValueError(f"in-language tests are not supported for {language.name}")
    files, compile_command, run, binds = build(
        language, prelude, code, tests, (_numbers(masked), _numbers(mask), len(marker))
    )
    return Harness(files, compile_command, run, marker, binds)


def _numbers(data: bytes) -> str:
    return ", ".join(str(byte) for byte in data)


def _cpp(language: Language, prelude: str, code: str, tests: str, marker: tuple[str, str, int]):
    masked, mask, size = marker
    body = tests.rstrip()
    if len(_CPP_MAIN.findall(body)) != 1 or not body.endswith("}"):
        raise ValueError("C++ tests must end with their one `int main()` (MultiPL-E's form)")
    # main becomes a function the runner calls; it gets the `return 0;` that main may leave out
    declared, emitted = _as_the_program_declares(body, code)
    tests_function = _CPP_MAIN.sub(f"int {CPP_TESTS_FUNCTION}()", declared, count=1)
    tests_function = tests_function[:-1] + "    return 0;\n}"
    checks = """#include <cstdio>
#undef assert
static void diffugrpo_failed(const char *what, int line) {
    std::fprintf(stderr, "assertion failed (tests line %d): %s\\n", line, what);
    __builtin_trap();
}
#define assert(condition) ((condition) ? (void)0 : diffugrpo_failed(#condition, __LINE__))"""
    runner = f"""int main() {{
    {CPP_TESTS_FUNCTION}();
    static const unsigned char masked[] = {{{masked}}}, mask[] = {{{mask}}};
    char line[{size + 1}] = {{0}};
    for (int at = 0; at < {size}; ++at) line[at] = (char)(masked[at] ^ mask[at]);
    std::printf("%s\\n", line);
    std::fflush(stdout);
    return 0;
}}"""
    program = _joined(prelude, code, "\n".join(emitted))
    files = (("solution.cpp", program), ("tests.cpp", _joined(prelude, checks, tests_function, runner)))
    compiler = shlex.quote(resolved_tool("g++") or "g++")
    flags = CPP_FLAGS
    header = precompiled_stdcpp() if STDCPP in prelude else None
    if header is not None:  # MultiPL-E's prelude includes it first anyway: the same code, compiled 4x faster
        flags += f" -I{shlex.quote(header)} -include {STDCPP}"
    compile_command = _script(
        f"{compiler} {flags} -Dmain=diffugrpo_program_main -c solution.cpp -o solution.o",
        f"{compiler} {flags} -c tests.cpp -o tests.o",
        # the program keeps as global only the global-namespace functions the tests call, and its weak copies of
        # what the tests define too (inline and template code, merged by the linker: the tests' copy, linked
        # first, is the one kept); a strong definition of such a name would replace the tests' copy, so it is local
        "nm -u -j tests.o | grep -E '^_Z[0-9]' > called || true",
        "nm -g -j --defined-only tests.o > defined",
        "echo diffugrpo_keeps_nothing > kept",  # objcopy refuses an empty list
        "nm -g -j --defined-only solution.o | grep -Fx -f called >> kept || true",
        "nm -g --defined-only solution.o | sed -n 's/^[0-9a-f]* [VWu] //p' | grep -Fx -f defined >> kept || true",
        "objcopy --keep-global-symbols=kept solution.o",
        f"{compiler} -o solution tests.o solution.o",
        "rm -f solution.cpp tests.cpp solution.o tests.o called defined kept",
        "chmod a-r solution",
    )
    return files, compile_command, ("./solution",), (header,) if header else ()


@functools.lru_cache(maxsize=1)
def precompiled_stdcpp() -> str | None:
    """A folder holding ``bits/stdc++.h.gch``, GCC's precompiled ``<bits/stdc++.h>`` for :data:`CPP_FLAGS`, built once
    per machine and compiler from the system's own header (trusted code, outside the sandbox) into the cache; None
    where it cannot be built (compiles then parse the header, as without it)."""
    compiler = resolved_tool("g++")
    if compiler is None:
        return None
    try:
        found = subprocess.run(
            [compiler, "-std=c++17", "-H", "-E", "-x", "c++", "-"],
            input=f"#include <{STDCPP}>\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        header = next(line.split(" ", 1)[1] for line in found.stderr.splitlines() if line.endswith(f"/{STDCPP}"))
        version = subprocess.run([compiler, "-dumpfullversion"], capture_output=True, text=True, check=True).stdout
        key = hashlib.sha256(f"{compiler}|{version.strip()}|{CPP_FLAGS}|{header}".encode()).hexdigest()[:16]

        def build(folder):
            (folder / "bits").mkdir()
            command = [compiler, *CPP_FLAGS.split(), "-x", "c++-header", header, "-o", str(folder / f"{STDCPP}.gch")]
            subprocess.run(command, capture_output=True, timeout=300, check=True)
            # the header beside its precompiled form: a later `#include` of it (the prelude's) finds it here
            (folder / STDCPP).symlink_to(header)
            for path in (folder, folder / "bits", folder / f"{STDCPP}.gch"):  # readable by the sandbox's uids
                path.chmod(0o755 if path.is_dir() else 0o644)

        return str(build_once(diffugrpo_home() / "pch" / key, build))
    except (OSError, subprocess.SubprocessError, StopIteration) as error:
        logger.warning("no precompiled <%s> (%s): C++ compiles parse it each time", STDCPP, error)
        return None


def _as_the_program_declares(tests: str, code: str) -> tuple[str, list[str]]:
    """The tests with each function they declare re-declared as the program defines it, where it defines it with
    plain types (``const std::vector<long>&`` for the prompt's ``std::vector<long>``, ``int`` for ``long``: MultiPL-E's
    single-file harness accepts both), and the lines that make the program's unit emit those functions even when
    it wrote them ``inline`` or ``constexpr`` (their address taken there, as the declared type)."""
    emitted: list[str] = []

    def declared(found: re.Match) -> str:
        name = found.group(1)
        definition = re.search(
            rf"^[ \t]*({_CPP_TYPE_TEXT}+?)\b{name}\s*\(({_CPP_TYPE_TEXT}*)\)\s*(?:const\s*)?\{{", code, re.M
        )
        if definition is None or _CPP_NOT_LINKABLE.search(definition.group(1)) or not definition.group(1).strip():
            return found.group(0)
        returned, parameters = (_CPP_INLINE.sub("", part).strip() for part in definition.groups())
        emitted.append(
            f"[[gnu::used]] static auto *const diffugrpo_emits_{len(emitted)} = "
            f"static_cast<{returned} (*)({parameters})>(&::{name});"
        )
        qualified = [_CPP_STD_TYPES.sub(r"std::\1", part) for part in (returned, parameters)]
        return f"{qualified[0]} {name}({qualified[1]});"

    head, main, rest = tests.partition("int main")
    return _CPP_DECLARED.sub(declared, head) + main + rest, emitted


def _java(language: Language, prelude: str, code: str, tests: str, marker: tuple[str, str, int]):
    masked, mask, size = marker
    imports = "\n".join(f"import {package}.{name};" for package, names in JAVA_TYPES.items() for name in names)
    tests_class = java_main_class(tests)
    runner = f"""{imports}
public class {JAVA_RUNNER_CLASS} {{
    public static void main(String[] args) throws Throwable {{
        Class<?> tests = Class.forName("{tests_class}", false, {JAVA_RUNNER_CLASS}.class.getClassLoader());
        new File("classes/{tests_class}.class").delete();
        new File("classes/{JAVA_RUNNER_CLASS}.class").delete();
        Method main = tests.getMethod("main", String[].class);
        try {{
            main.invoke(null, (Object) args);
        }} catch (InvocationTargetException failed) {{
            throw failed.getCause();
        }}
        int[] masked = {{{masked}}}, mask = {{{mask}}};
        char[] line = new char[{size}];
        for (int at = 0; at < {size}; at++) line[at] = (char) (masked[at] ^ mask[at]);
        System.out.println(new String(line));
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }}
}}"""
    program = _joined(prelude, code)
    files = (
        (language.source_file(program), program),
        (f"{tests_class}.java", _joined(imports, prelude, tests)),
        (f"{JAVA_RUNNER_CLASS}.java", runner),
    )
    names = [name for name, _ in files]
    compile_command = _script(shlex.join(_command(language.compile[:-1], "") + names), f"rm -f {shlex.join(names)}")
    return files, compile_command, tuple(_command(language.run, "", JAVA_RUNNER_CLASS)), ()


def _javascript(language: Language, prelude: str, code: str, tests: str, marker: tuple[str, str, int]):
    masked, mask, _ = marker
    solution = language.source_name
    hidden = json.dumps(list(JS_HIDDEN_MODULES))
    runner = f""""use strict";
const fs = require("fs"), path = require("path"), vm = require("vm");
const program = fs.readFileSync("{solution}", "utf8"), tests = fs.readFileSync("{JS_TESTS_FILE}", "utf8");
for (const name of ["{solution}", "{JS_TESTS_FILE}", __filename]) fs.unlinkSync(name);
const assert = require("node:assert");
Object.freeze(assert);
Object.freeze(assert.strict);
const hidden = new Set({hidden});
const programRequire = (name) => {{
    if (hidden.has(String(name).replace(/^node:/, ""))) throw new Error(`module ${{name}} is not available here`);
    return require(name);
}};
const testsRequire = (name) => (/^(node:)?assert$/.test(name) ? assert : /^(node:)?assert\\/strict$/.test(name) ? assert.strict : require(name));
process.on("SIGUSR1", () => {{}});
process.binding = process._linkedBinding = undefined;
delete process.mainModule;
const programModule = {{ exports: {{}}, filename: path.resolve("{solution}") }};
Object.assign(globalThis, {{ require: programRequire, module: programModule, exports: programModule.exports,
    __filename: programModule.filename, __dirname: process.cwd() }});
vm.runInThisContext(program, {{ filename: "{solution}" }});
vm.runInThisContext("(function (require) {{ \\"use strict\\";\\n" + tests + "\\n}})", {{ filename: "{JS_TESTS_FILE}" }})(testsRequire);
const masked = [{masked}], mask = [{mask}];
fs.writeSync(1, String.fromCharCode(...masked.map((byte, at) => byte ^ mask[at])) + "\\n");
process.exit(0);
"""
    files = ((solution, _joined(prelude, code)), (JS_TESTS_FILE, tests), (JS_RUNNER_FILE, runner))
    return files, None, tuple(_command(language.run, JS_RUNNER_FILE)), ()
