"""In-language harnesses (``rewards/harnesses.py``): wrong programs that read the tests or rerun them to pass anyway.

Each program here returns a wrong answer and then tries to get the runner's marker another way: C++ reads the tests'
source while it compiles (``#include``, ``.incbin``, a path through ``/proc/self/cwd`` or the work dir), Java resets
the tests' guard and reruns them from its own code as an oracle, JavaScript scans its own memory (``/proc/self/mem``)
for the runner's marker. Every one scores 0; the correct programs of ``tests/test_languages.py`` still pass, and one
per language passes here beside them in the same run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diffugrpo_plugin.data import prepare
from diffugrpo_plugin.rewards.code_tests import tests_from_row as spec_of
from diffugrpo_plugin.rewards.test_runs import Outcome, run_tests
from reward_support import tight_sandbox

FIXTURE = Path(__file__).parent / "fixtures" / "multipl_e.jsonl"

# the marker is the runner's masked bytes XOR the key the tests' function returns (see harnesses._cpp): a program
# holding the tests' source computes it, prints it on a line of its own and exits 0 before any check ran
CPP_PRINTS_THE_MARKER_FROM = """#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
extern const char diffugrpo_stolen[];
static int forged = [] {{
    std::string text(diffugrpo_stolen);
    size_t at = text.find("ULL;"), start = text.rfind("return ", at);
    if (at == std::string::npos || start == std::string::npos) return 0;
    unsigned long long key = std::strtoull(text.c_str() + start + 7, nullptr, 10);
    size_t list = text.find("masked[] = {{");
    if (list == std::string::npos) return 0;
    const char *p = text.c_str() + list + 12;
    std::string marker;
    for (int i = 0; *p && *p != '}}'; ++i) {{
        marker += (char)(std::strtol(p, (char **)&p, 10) ^ (unsigned char)(key >> (8 * (i % 8))));
        while (*p == ',' || *p == ' ') ++p;
    }}
    std::printf("\\n%s\\n", marker.c_str());
    std::fflush(stdout);
    std::_Exit(0);
}}();
asm(".section .rodata\\n.globl diffugrpo_stolen\\ndiffugrpo_stolen:\\n.incbin \\"{path}\\"\\n.byte 0\\n.text\\n");
long add(long x, long y) {{ return 0; }}"""

# the tests' own translation unit included into the program's, its failures made harmless; its main (renamed by
# -Dmain) runs the tests and prints the marker
CPP_INCLUDES_THE_TESTS = """#include <bits/stdc++.h>
#include <unistd.h>
#define __builtin_trap() ((void)0)
namespace stolen {{
#include "{path}"
}}
static int forged = (stolen::diffugrpo_program_main(), std::fflush(stdout), std::_Exit(0), 0);
long add(long x, long y) {{ return 0; }}"""

# learns each answer by rerunning the tests from inside the first call: a guess for call k is right when the
# rerun reaches call k + 1; the guard is reset first wherever it keeps its state
JAVA_RERUNS_THE_TESTS_AS_AN_ORACLE = """import java.util.*;
class Problem {
    static List<Long> known = new ArrayList<>();
    static int calls = 0, outer = 0;
    static long guess = -20;
    static boolean nested = false, learned = false;
    static class Reached extends RuntimeException {}
    static void resetGuard() {
        try {
            for (java.lang.reflect.Field f : Class.forName("DiffugrpoTestsRunner").getDeclaredFields()) {
                f.setAccessible(true);
                if (f.getType() == int.class) f.setInt(null, 0);
                if (f.getType() == boolean.class) f.setBoolean(null, false);
            }
        } catch (Throwable e) {}
    }
    public static long add(long x, long y) {
        if (nested) {
            int k = calls++;
            if (k < known.size()) return known.get(k);
            if (k == known.size()) return guess;
            throw new Reached();
        }
        if (!learned) {
            nested = true;
            while (guess < 200) {
                resetGuard();
                calls = 0;
                try { ProblemTests.main(new String[0]); known.add(guess); break; }
                catch (Reached e) { known.add(guess); guess = -20; }
                catch (AssertionError e) { guess++; }
            }
            nested = false;
            learned = true;
        }
        return outer < known.size() ? known.get(outer++) : 0;
    }
}"""

JAVA_RERUNS_FROM_A_THREAD = """class Problem {
    public static long add(long x, long y) {
        Thread again = new Thread(() -> ProblemTests.main(new String[0]));
        again.start();
        try { again.join(); } catch (InterruptedException e) {}
        return 0;
    }
}"""

# reads the runner's masked marker and its mask out of its own process's memory, prints the marker and exits 0
# before the tests ran
JS_SCANS_ITS_OWN_MEMORY = r"""const fs = require("fs");
(function () {
  const fd = fs.openSync("/proc/self/mem", "r");
  const needle = Buffer.from("const masked = [");
  for (const line of fs.readFileSync("/proc/self/maps", "utf8").split("\n")) {
    const range = /^([0-9a-f]+)-([0-9a-f]+) r/.exec(line);
    if (!range) continue;
    const start = parseInt(range[1], 16), size = parseInt(range[2], 16) - start;
    if (size > 64 << 20) continue;
    const memory = Buffer.alloc(size);
    try { fs.readSync(fd, memory, 0, size, start); } catch (error) { continue; }
    for (let at = memory.indexOf(needle); at >= 0; at = memory.indexOf(needle, at + 1)) {
      const found = /const masked = \[([0-9, ]+)\], mask = \[([0-9, ]+)\]/.exec(memory.toString("latin1", at, at + 20000));
      if (!found) continue;
      const masked = found[1].split(",").map(Number), mask = found[2].split(",").map(Number);
      fs.writeSync(1, "\n" + String.fromCharCode(...masked.map((byte, i) => byte ^ mask[i])) + "\n");
      process.exit(0);
    }
  }
})();
function add(x, y) {
  return 0;
}"""

FORGERIES = [
    ("cpp/HumanEval_53_add", CPP_PRINTS_THE_MARKER_FROM.format(path="tests.cpp")),
    ("cpp/HumanEval_53_add", CPP_PRINTS_THE_MARKER_FROM.format(path="/work/tests.cpp")),
    ("cpp/HumanEval_53_add", CPP_PRINTS_THE_MARKER_FROM.format(path="/proc/self/cwd/tests.cpp")),
    ("cpp/HumanEval_53_add", CPP_INCLUDES_THE_TESTS.format(path="tests.cpp")),
    ("cpp/HumanEval_53_add", CPP_INCLUDES_THE_TESTS.format(path="/proc/self/cwd/tests.cpp")),
    ("java/HumanEval_53_add", JAVA_RERUNS_THE_TESTS_AS_AN_ORACLE),
    ("java/HumanEval_53_add", JAVA_RERUNS_FROM_A_THREAD),
    ("javascript/HumanEval_53_add", JS_SCANS_ITS_OWN_MEMORY),
]
CORRECT = {
    "cpp/HumanEval_53_add": "long add(long x, long y) { return x + y; }",
    "java/HumanEval_53_add": "class Problem {\n    public static long add(long x, long y) { return x + y; }\n}",
    "javascript/HumanEval_53_add": "function add(x, y) {\n  return x + y;\n}",
}


@pytest.fixture(scope="module")
def rows():
    return {row["extra_info"]["task_id"]: row["extra_info"] for row in prepare("multipl-e", "test", FIXTURE)}


@pytest.fixture(scope="module")
def box():
    return tight_sandbox(timeout_s=5.0, memory_mb=1024, max_output_bytes=20_000)


@pytest.mark.sandbox
@pytest.mark.toolchains
@pytest.mark.parametrize("task, code", FORGERIES, ids=[f"{task}-{n}" for n, (task, _) in enumerate(FORGERIES)])
def test_a_program_that_reads_or_reruns_the_tests_scores_zero(rows, box, task, code):
    [outcome] = run_tests(code, spec_of(rows[task]), box, cache=False)
    assert not outcome.passed, outcome
    assert outcome.judged_inside or outcome.outcome is Outcome.COMPILATION_ERROR


@pytest.mark.sandbox
@pytest.mark.toolchains
@pytest.mark.parametrize("task", sorted(CORRECT))
def test_the_correct_program_passes_beside_them(rows, box, task):
    [outcome] = run_tests(CORRECT[task], spec_of(rows[task]), box, cache=False)
    assert outcome.passed and outcome.judged_inside, outcome
