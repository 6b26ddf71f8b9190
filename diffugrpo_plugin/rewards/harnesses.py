"""How another language's program and its in-language tests become the files the sandbox compiles and runs.

In-language tests (MultiPL-E's form: ``test`` holds C++ with its own ``int main()``, a Java class whose ``main``
runs the tests, or JavaScript that calls them) share the program's process, so their verdict is the program's
word (``TestOutcome.judged_inside``). The harness takes away the cheap ways to give it falsely:

* **The tests must run to their end.** A runner calls the tests and then prints a marker, a random line fresh
  for every run that is nowhere in the files as text (it is stored masked and unmasked at run time). A
  program that ends the process early with success (``exit(0)``, ``System.exit(0)`` in a static initialiser,
  ``process.exit(0)``) never prints it; the verdict needs the marker and exit status 0.
* **C++**: ``assert`` is defined afresh between program and tests (``#undef NDEBUG``, ``<cassert>`` again),
  so a program's ``#define NDEBUG`` or ``#define assert(x)`` does not reach them.
* **Java**: the runner deletes its own class file before the tests run, so the program cannot read the
  marker out of it.
* **JavaScript**: ``node:assert`` is frozen before the program loads (it cannot replace ``deepEqual``); the
  runner file deletes itself first.

What stays possible, and is why these verdicts are flagged rather than trusted: a program in the same process
can still change what a comparison means (C++ ``operator==`` overloads, interposing the C library's
``__assert_fail``, a Java object whose ``equals`` always answers true where the tests call the program's
object's ``equals``), or read the marker out of its own memory. Tests judged outside the process (stdin/stdout
pairs) do not have this weakness. Standard library only. No torch.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from diffugrpo_plugin.sandbox.languages import Language, java_main_class

MARKER_BYTES = 16
CPP_TESTS_FUNCTION = "diffugrpo_tests_main"
JAVA_RUNNER_CLASS = "DiffugrpoTestsRunner"
JS_RUNNER_FILE = "diffugrpo_runner.js"
_CPP_MAIN = re.compile(r"\bint\s+main\s*\(\s*(?:void)?\s*\)")


@dataclass(frozen=True)
class Harness:
    """The files of one program (name, content), the one its compiler or interpreter is given (``entry``), the
    Java class to run, and the line the tests print once they ran to their end (None: stdin/stdout tests)."""

    files: tuple[tuple[str, str], ...]
    entry: str
    main_class: str
    marker: str | None = None


def _joined(*parts: str) -> str:
    return "\n".join(part.rstrip("\n") for part in parts if part) + "\n"


def program_harness(language: Language, prelude: str, code: str) -> Harness:
    """A program judged on its output (stdin/stdout tests): the prelude, then the program."""
    source = _joined(prelude, code)
    name = language.source_file(source)
    return Harness(((name, source),), name, java_main_class(source))


def tests_harness(language: Language, prelude: str, code: str, tests: str) -> Harness:
    """A program with its in-language tests and a runner that prints a fresh marker once they pass (see the
    module docstring). ValueError when ``tests`` do not have the form the language's runner needs."""
    marker = secrets.token_hex(MARKER_BYTES)
    mask = secrets.token_bytes(len(marker))
    masked = bytes(char ^ key for char, key in zip(marker.encode(), mask))
    build = {"cpp": _cpp, "java": _java, "javascript": _javascript}.get(language.name)
    if build is None:
        raise ValueError(f"in-language tests are not supported for {language.name}")
    files, entry, main_class = build(language, prelude, code, tests, _numbers(masked), _numbers(mask), len(marker))
    return Harness(files, entry, main_class, marker)


def _numbers(data: bytes) -> str:
    return ", ".join(str(byte) for byte in data)


def _cpp(language: Language, prelude: str, code: str, tests: str, masked: str, mask: str, size: int):
    body = tests.rstrip()
    if len(_CPP_MAIN.findall(body)) != 1 or not body.endswith("}"):
        raise ValueError("C++ tests must be one `int main()` that ends the text (MultiPL-E's form)")
    # main becomes a function the runner calls; it gets the `return 0;` that main may leave out
    tests_function = _CPP_MAIN.sub(f"int {CPP_TESTS_FUNCTION}()", body, count=1)[:-1] + "    return 0;\n}"
    runner = f"""#include <cstdio>
int main() {{
    {CPP_TESTS_FUNCTION}();
    static const unsigned char masked[] = {{{masked}}}, mask[] = {{{mask}}};
    char line[{size + 1}] = {{0}};
    for (int at = 0; at < {size}; ++at) line[at] = (char)(masked[at] ^ mask[at]);
    std::printf("%s\\n", line);
    std::fflush(stdout);
    return 0;
}}"""
    source = _joined(prelude, code, "#undef NDEBUG\n#include <cassert>", tests_function, runner)
    name = language.source_file(source)
    return ((name, source),), name, ""


def _java(language: Language, prelude: str, code: str, tests: str, masked: str, mask: str, size: int):
    tests_class = java_main_class(tests)
    runner = f"""class {JAVA_RUNNER_CLASS} {{
    public static void main(String[] args) throws Throwable {{
        new java.io.File("classes/{JAVA_RUNNER_CLASS}.class").delete();
        {tests_class}.main(args);
        int[] masked = {{{masked}}}, mask = {{{mask}}};
        char[] line = new char[{size}];
        for (int at = 0; at < {size}; at++) line[at] = (char) (masked[at] ^ mask[at]);
        System.out.println(new String(line));
        System.out.flush();
    }}
}}"""
    source = _joined(prelude, code, tests, runner)
    name = language.source_file(source)
    return ((name, source),), name, JAVA_RUNNER_CLASS


def _javascript(language: Language, prelude: str, code: str, tests: str, masked: str, mask: str, size: int):
    solution = language.source_name
    runner = f""""use strict";
require("fs").unlinkSync(__filename);
const assert = require("node:assert");
Object.freeze(assert);
Object.freeze(assert.strict);
require("./{solution}");
const masked = [{masked}], mask = [{mask}];
process.stdout.write(String.fromCharCode(...masked.map((byte, at) => byte ^ mask[at])) + "\\n");
"""
    return ((solution, _joined(prelude, code, tests)), (JS_RUNNER_FILE, runner)), JS_RUNNER_FILE, ""
