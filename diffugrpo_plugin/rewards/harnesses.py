"""How another language's program and its tests become the files the sandbox compiles and the commands it runs.

A program judged on its output (stdin/stdout tests) is its file and the language's own commands
(``sandbox/languages.py``). In-language tests (MultiPL-E's form, ``test``) share the program's process, so their
verdict is the program's word (``TestOutcome.judged_inside``). This harness keeps the tests out of the program's
reach as far as one process allows (each point below closed an attack two adversarial reviews found):

* **The tests must run to their end, once, in this process.** A runner calls them and then prints a marker, a
  random line fresh for every run, on a line of its own; the verdict needs it and exit status 0, so a program
  that ends the process early with success (``exit(0)``, ``System.exit(0)`` in a static initialiser,
  ``process.exit(0)``) fails. The process may start threads but not processes (``Job.no_fork``): a forked copy
  could try answers against the tests and report back. A failed check names its line or number, never the
  expected value.
* **The tests are compiled apart from the program, and no file they came from is left to read.**

  - C++: program and tests are two translation units, so the program's macros, ``using namespace std`` and
    operator overloads never reach the tests. They compile in two jobs (:attr:`Harness.link`): the program's
    first, in a work dir holding its source alone, so no ``#include``, ``.incbin`` or path of its can read the
    tests' source, which only the second job writes. The tests call each function through an entry the program's unit
    defines with the prompt's signature (``return name(args);``), so the program's typedefs, templates,
    overloads, ``static`` or ``auto`` functions resolve as in one file. The program's object file keeps as
    global only those entries and its weak copies of inline code the tests define too (the tests' copy, linked
    first, wins); anything else it defines (``memcmp``, ``__assert_fail``, a template instance) becomes local,
    and a "unique" symbol it writes by hand is refused. A failed ``assert`` of the tests ends the process by the
    ``exit_group`` system call (no signal that a program's handler could catch and return from); their ``main``
    returns the key the marker is masked with, so a program that jumps past the tests has no marker to print.
    A program's own ``main`` is renamed; the sources are deleted after compiling.
  - Java: the tests are their own compilation unit, calling ``Problem.name(...)`` (no inheritance: a program's
    nested or inherited names do not reach them), with single-type imports of every library type they name (a
    program's own ``ArrayList`` or ``Objects`` class does not shadow them). The runner loads the tests' class,
    deletes its class file and its own, then calls them; they end the process unless their stack is exactly
    theirs over the runner's ``main`` (a program rerunning them, from its code or a thread, to learn from their
    failures): a rule with no state that reflection could reset.
  - JavaScript: the runner reads program and tests, deletes both files and itself, runs the program as a
    script and the tests as a separate strict function given the ``node:assert`` it froze before the program
    ran (a program that replaces ``require``, ``test`` or ``Module._load``, or reads a caller's source, changes
    nothing the tests see). The program gets the library's own modules only, without those that reach the
    inspector, the heap or another process or socket (:data:`JS_HIDDEN_MODULES`), nor ``process.binding``,
    ``dlopen`` or ``getBuiltinModule``; node zero-fills every ``Buffer``, so none holds the freed memory the
    tests' source was read into.

What stays possible, and is why these verdicts are flagged rather than trusted: a program reading its own
process's memory (pointers, ``sun.misc.Unsafe``, its executable; no job opens ``/proc/self/mem``) for the
marker's key or the tests' expected values, and a Java object whose ``equals`` answers true where the tests call it on the program's object (the
data prep asks the expected value's ``equals`` for ``actual.equals(expected)``). Tests judged outside the process
(stdin/stdout pairs) have none of these weaknesses. No torch.
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
    CPP_FLAGS,
    CPP_STANDARD,
    MAIN_CLASS_PLACEHOLDER,
    SOURCE_PLACEHOLDER,
    Language,
    java_main_class,
    resolved_tool,
)

logger = logging.getLogger("diffugrpo.rewards")

MARKER_BYTES = 16
STDCPP = "bits/stdc++.h"
SANDBOX_OWN_DIRS = ("/tmp", "/dev/shm")  # fresh in every sandbox (see sandbox/host.py)
CPP_TESTS_FUNCTION = "diffugrpo_tests_main"
CPP_ENTRY = "diffugrpo_entry_"
JAVA_RUNNER_CLASS = "DiffugrpoTestsRunner"
JS_TESTS_FILE = "tests.js"
JS_RUNNER_FILE = "diffugrpo_runner.js"
SHELL = "/bin/sh"
_JAVA_MAIN_OPENING = re.compile(r"\bstatic\s+void\s+main\s*\([^)]*\)\s*(?:throws\s+[\w.,\s]+)?\{")
_CPP_MAIN = re.compile(r"\bint\s+main\s*\(\s*(?:void)?\s*\)")
# a declaration the tests make of a function they call: return type, name, parameters (no parentheses inside)
_CPP_DECLARED = re.compile(r"^([^#/\n][^;{}()\n]*?)\b([A-Za-z_]\w*)\s*\(([^;{}()\n]*)\)\s*;[ \t]*$", re.M)
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
        "StackTraceElement",
        "String",
        "System",
        "Throwable",
    ),
    "java.io": ("File",),
}
# The tests' assert, its comparisons made on copies in a realm of their own (a vm context: its own Object and Array
# prototypes). Node's deepEqual reads the values' Symbol.toStringTag, and `==` an object's Symbol.toPrimitive, through
# their prototype chains: in the program's realm a getter the program put on Array.prototype would be handed the
# tests' expected value mid-comparison, and could copy it into the array the program returned. The copy reads own
# properties and internal slots only (a Map's entries through Map.prototype.forEach of that realm), so no prototype
# of the program's realm is consulted on the expected value; the program's own getters and proxies run on the
# program's values only. strictEqual (identity, Object.is) and ok need no copy. Errors keep their name and message.
JS_CLEAN_ASSERT = r"""
const cleanRealm = vm.createContext(Object.create(null));
const copyClean = vm.runInContext(`(programObjectPrototype, programErrorPrototype) => {
  "use strict";
  const getProto = Object.getPrototypeOf, describe = Object.getOwnPropertyDescriptor, ownKeys = Reflect.ownKeys;
  const slot = (method, value) => { try { method.call(value); return true; } catch (error) { return false; } };
  const mapEach = Map.prototype.forEach, setEach = Set.prototype.forEach, getTime = Date.prototype.getTime;
  const regExpSource = describe(RegExp.prototype, "source").get, regExpFlags = describe(RegExp.prototype, "flags").get;
  const typedArray = getProto(Uint8Array.prototype);
  const typedArrayTag = describe(typedArray, Symbol.toStringTag).get, typedArrayLength = describe(typedArray, "length").get;
  const boxes = [Number, String, Boolean, BigInt, Symbol];
  const defineOwn = (object, key, value) =>
    Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });
  const isError = (value) => {
    for (let prototype = getProto(value); prototype !== null; prototype = getProto(prototype)) {
      if (prototype === programErrorPrototype) return true;
    }
    return false;
  };
  // an error's message and name, which deepEqual compares though neither is enumerable: own data properties only,
  // read along the chain without calling a getter (one on a shared prototype would be handed the value)
  const dataOf = (value, key) => {
    for (let holder = value; holder !== null; holder = getProto(holder)) {
      const property = describe(holder, key);
      if (property !== undefined) return "value" in property ? property.value : undefined;
    }
    return undefined;
  };
  const standIns = new Map();  // a class's prototype -> its stand-in here: two of its instances still compare equal
  const copies = new Map();
  const copyOf = (value) => {
    if (value === null || (typeof value !== "object" && typeof value !== "function")) return value;
    if (typeof value === "function") return value;
    if (copies.has(value)) return copies.get(value);
    let copy;
    if (Array.isArray(value)) copy = new Array(describe(value, "length").value);
    else if (slot(Map.prototype.has, value)) copy = new Map();
    else if (slot(Set.prototype.has, value)) copy = new Set();
    else if (slot(getTime, value)) copy = new Date(getTime.call(value));
    else if (regExpFlags && slot(regExpSource, value) && getProto(value) !== null) {
      copy = new RegExp(regExpSource.call(value), regExpFlags.call(value));
    } else if (ArrayBuffer.isView(value) && typedArrayTag.call(value) !== undefined) {
      copy = new globalThis[typedArrayTag.call(value)](typedArrayLength.call(value));
    } else {
      const box = boxes.find((kind) => slot(kind.prototype.valueOf, value));
      if (box !== undefined) copy = Object(box.prototype.valueOf.call(value));
      else {
        const prototype = getProto(value);
        if (prototype === null) copy = Object.create(null);
        else if (prototype === programObjectPrototype) copy = {};
        else {
          if (!standIns.has(prototype)) standIns.set(prototype, Object.create(Object.prototype));
          copy = Object.create(standIns.get(prototype));
        }
      }
    }
    copies.set(value, copy);
    if (isError(value)) {
      defineOwn(copy, "name", copyOf(dataOf(value, "name")));
      defineOwn(copy, "message", copyOf(dataOf(value, "message")));
    }
    if (copy instanceof Map) mapEach.call(value, (item, key) => copy.set(copyOf(key), copyOf(item)));
    if (copy instanceof Set) setEach.call(value, (item) => copy.add(copyOf(item)));
    for (const key of ownKeys(value)) {
      const property = describe(value, key);
      if (property === undefined || !property.enumerable || (Array.isArray(copy) && key === "length")) continue;
      defineOwn(copy, key, copyOf("value" in property ? property.value : property.get && property.get.call(value)));
    }
    return copy;
  };
  return (value) => { copies.clear(); return copyOf(value); };
}`, cleanRealm)(Object.prototype, Error.prototype);
const realAssert = require("node:assert");
// what runs here after the program has run uses no method of the program's realm (a spread, .every, a RegExp's test
// would each call the program's own replacement, with the test's values)
const isObject = (value) => value !== null && typeof value === "object";
const copied = (compare, onlyWithAPrimitive) => function (actual, expected, message) {
  if (onlyWithAPrimitive && isObject(actual) && isObject(expected)) return compare(actual, expected, message);
  return compare(copyClean(actual), copyClean(expected), message);
};
const withCleanComparisons = (base) => {
  const wrapped = Object.assign(function assert(value, message) { return base(value, message); }, base);
  for (const name of ["deepEqual", "notDeepEqual", "deepStrictEqual", "notDeepStrictEqual", "partialDeepStrictEqual"]) {
    if (typeof base[name] === "function") wrapped[name] = copied(base[name], false);
  }
  for (const name of ["equal", "notEqual"]) wrapped[name] = copied(base[name], true);
  return wrapped;
};
const assert = withCleanComparisons(realAssert);
assert.strict = withCleanComparisons(realAssert.strict);
assert.strict.strict = assert.strict;
for (const frozen of [assert, assert.strict, realAssert, realAssert.strict]) Object.freeze(frozen);
"""
# The language's built-ins as the program found them, for the tests. Taken before the program runs: the
# constructors the tests name (passed to the tests as their own parameters, so a program's top-level `class Set` does
# not stand in for them) and each built-in prototype's own properties. Once the program's top-level code has run,
# `restoreBuiltins` puts back every property it replaced on those objects and removes what it added that would
# answer the tests' own uses (a key the prototype chain already has, an accessor, a symbol: its Set.prototype.add or
# Array.prototype.sort was handed the tests' expected values and tables); a plain new method (Array.prototype.sum)
# stays. Each property then becomes a getter of its value whose setter gives an instance its own property (so
# `this.name = ...` in an Error subclass still works) and each object takes no new property, so nothing the program
# runs during the tests can replace them again. It runs only captured functions, never a method the program could
# have replaced. A property it cannot put back (the program made its replacement permanent) fails the run.
JS_BUILTINS_GUARD = r"""
const builtinNames = ["Object", "Function", "Array", "Number", "Boolean", "String", "Symbol", "BigInt", "Date",
  "RegExp", "Map", "Set", "WeakMap", "WeakSet", "WeakRef", "Promise", "Proxy", "Reflect", "JSON", "Math",
  "ArrayBuffer", "DataView", "Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array", "Uint16Array", "Int32Array",
  "Uint32Array", "Float32Array", "Float64Array", "BigInt64Array", "BigUint64Array", "Error", "TypeError", "RangeError",
  "SyntaxError", "ReferenceError", "EvalError", "URIError", "AggregateError"];
const builtinValues = builtinNames.map((name) => globalThis[name]);
const restoreBuiltins = (() => {
  "use strict";
  const { ownKeys, defineProperty, deleteProperty, getPrototypeOf, setPrototypeOf, has, preventExtensions } = Reflect;
  const objectPrototype = Object.prototype, hasInstance = Symbol.hasInstance;
  const defaultHasInstance = Function.prototype[Symbol.hasInstance];
  // names a protocol looks up on any value (JSON.stringify's toJSON, a thenable's then): never the program's to add
  const protocols = ["toJSON", "then", "constructor", "toString", "valueOf", "toLocaleString"];
  const ownDescriptor = Object.getOwnPropertyDescriptor, hasOwn = Object.hasOwn, TypeErrorClass = TypeError;
  // a descriptor without a prototype: a property the program put on Object.prototype ("get", "value") is never
  // read as one of its fields
  const describe = (object, key) => {
    const property = ownDescriptor(object, key);
    if (property === undefined) return undefined;
    const plain = { __proto__: null };
    for (let at = 0; at < fields.length; at++) if (hasOwn(property, fields[at])) plain[fields[at]] = property[fields[at]];
    return plain;
  };
  const fields = ["value", "writable", "get", "set", "enumerable", "configurable"];
  const guarded = [], errors = [];
  const guard = (value) => {
    if (value !== null && (typeof value === "object" || typeof value === "function")) guarded[guarded.length] = value;
  };
  for (let at = 0; at < builtinNames.length; at++) {
    const value = builtinValues[at];
    guard(value.prototype);
    guard(value);
    if (/Error$/.test(builtinNames[at])) errors[errors.length] = value;  // their stackTraceLimit is node's to set
  }
  const iterators = [[][Symbol.iterator](), new Set()[Symbol.iterator](), new Map()[Symbol.iterator](),
    ""[Symbol.iterator](), /a/[Symbol.matchAll]("a")];
  for (let at = 0; at < iterators.length; at++) guard(getPrototypeOf(iterators[at]));
  guard(getPrototypeOf(getPrototypeOf(iterators[0])));  // %IteratorPrototype%
  for (const made of [function* () {}, async function () {}, async function* () {}]) {
    const kind = getPrototypeOf(made);
    guard(kind);
    guard(kind.prototype);
  }
  guard(getPrototypeOf(getPrototypeOf(async function* () {}).prototype));  // %AsyncIteratorPrototype%
  guard(getPrototypeOf(Uint8Array));
  guard(getPrototypeOf(Uint8Array).prototype);
  const before = [];
  for (let at = 0; at < guarded.length; at++) {
    const keys = ownKeys(guarded[at]), descriptors = [];
    for (let k = 0; k < keys.length; k++) descriptors[k] = describe(guarded[at], keys[k]);
    before[at] = [keys, descriptors, getPrototypeOf(guarded[at])];
  }
  const same = (one, other) => other !== undefined && one.value === other.value && one.get === other.get &&
    one.set === other.set && one.writable === other.writable && one.enumerable === other.enumerable &&
    one.configurable === other.configurable;
  const fail = () => { throw new TypeErrorClass("the program made a change to the language's built-ins permanent"); };
  return () => {
    for (let at = 0; at < guarded.length; at++) {
      // indexed, not destructured: destructuring would call the array iterator, which may still be the program's
      const object = guarded[at], keys = before[at][0], descriptors = before[at][1], parentBefore = before[at][2];
      if (getPrototypeOf(object) !== parentBefore && !setPrototypeOf(object, parentBefore)) fail();
      const now = ownKeys(object);
      for (let k = 0; k < now.length; k++) {
        const key = now[k];
        let known = false;
        for (let j = 0; j < keys.length && !known; j++) known = keys[j] === key;
        if (known) continue;
        const property = describe(object, key), parent = getPrototypeOf(object);
        let protocol = false;
        for (let p = 0; p < protocols.length && !protocol; p++) protocol = protocols[p] === key;
        const answers = typeof key === "symbol" || !hasOwn(property, "value") || object === objectPrototype ||
          protocol || (parent !== null && has(parent, key));
        if (answers && !deleteProperty(object, key)) fail();
      }
      for (let k = 0; k < keys.length; k++) {
        if (!same(descriptors[k], describe(object, keys[k])) && !defineProperty(object, keys[k], descriptors[k])) fail();
      }
    }
    for (let at = 0; at < errors.length; at++) {
      // instanceof RangeError is the language's own, whatever the program defines during the tests
      defineProperty(errors[at], hasInstance, { __proto__: null, value: defaultHasInstance });
    }
    for (let at = 0; at < guarded.length; at++) {
      const object = guarded[at], keys = ownKeys(object);
      let isError = false;
      for (let e = 0; e < errors.length && !isError; e++) isError = errors[e] === object;
      for (let k = 0; k < keys.length; k++) {
        const key = keys[k], property = describe(object, key);
        if (!property.configurable || !hasOwn(property, "value") || (isError && key === "stackTraceLimit")) continue;
        const value = property.value;
        defineProperty(object, key, {
          __proto__: null,
          get() { return value; },
          set(given) {
            if (this === object) throw new TypeErrorClass(`a built-in's ${String(key)} is not the program's to replace`);
            defineProperty(this, key, { __proto__: null, value: given, writable: true, enumerable: true, configurable: true });
          },
          enumerable: property.enumerable,
          configurable: false,
        });
      }
      if (!isError) preventExtensions(object);  // node adds to an Error constructor (prepareStackTrace)
    }
  };
})();
"""
# node modules that reach the process's own scripts or the inspector (directly, or through another process,
# thread or socket): a program in the tests' process gets none of them
JS_HIDDEN_MODULES = (
    "inspector",
    "v8",
    "vm",
    "module",
    "repl",
    "worker_threads",
    "child_process",
    "cluster",
    "net",
    "http",
    "https",
    "http2",
    "tls",
    "dgram",
    "wasi",
    "trace_events",
)


@dataclass(frozen=True)
class Harness:
    """The files of one program (name, content), the command that compiles them (None: interpreted), the command
    that runs each test, and the line the runner prints once the tests ran to their end (None: stdin/stdout)."""

    files: tuple[tuple[str, str], ...]
    compile: tuple[str, ...] | None
    run: tuple[str, ...]
    marker: str | None = None
    ro_binds: tuple[str, ...] = ()  # host folders of trusted files the compile reads (the precompiled header)
    # a second compile job after the program's, with files written only then: the tests, which the program's
    # compile (its `#include`, `.incbin`) could read if they were on disk beside it
    link: tuple[str, ...] | None = None
    link_files: tuple[tuple[str, str], ...] = ()


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
    build = {"cpp": _cpp, "java": _java, "javascript": _javascript}.get(language.name)
    if build is None:
        raise ValueError(f"in-language tests are not supported for {language.name}")
    return build(language, prelude, code, tests, marker)


def _masked(marker: str, key: bytes) -> tuple[str, str]:
    """The marker XOR a key repeated over it, and the key: two lists of numbers for a runner's source."""
    masked = bytes(char ^ key[at % len(key)] for at, char in enumerate(marker.encode()))
    return _numbers(masked), _numbers(key)


def _numbers(data: bytes) -> str:
    return ", ".join(str(byte) for byte in data)


def _cpp(language: Language, prelude: str, code: str, tests: str, marker: str):
    body = tests.rstrip()
    head, main, rest = body.partition("int main")
    if len(_CPP_MAIN.findall(body)) != 1 or not body.endswith("}") or not _CPP_MAIN.match(main + rest):
        raise ValueError("C++ tests must end with their one `int main()` (MultiPL-E's form)")
    entries = _CPP_DECLARED.findall(head)
    if not entries:
        raise ValueError("C++ tests must declare the function they call before their `int main()`")
    # the tests call each declared function through an entry the program's unit defines with the declared
    # signature: the program's own overloads, typedefs, templates or `static` resolve there, as in one file
    declarations, wrappers = head, []
    for number, (returned, name, parameters) in enumerate(entries):
        entry = f"{CPP_ENTRY}{number}"
        # each argument passed as the tests' temporaries are in MultiPL-E's own harness: as an rvalue
        arguments = ", ".join(f"static_cast<decltype({name})&&>({name})" for name in _cpp_parameter_names(parameters))
        declarations = re.sub(
            rf"^([^#/\n][^;{{}}()\n]*?\b{re.escape(name)}\s*\([^;{{}}()\n]*\))\s*;",
            rf'\1 __asm__("{entry}");',
            declarations,
            count=1,
            flags=re.M,
        )
        wrappers.append(
            f'{returned} {entry}({parameters}) __asm__("{entry}");\n'
            f"{returned} {entry}({parameters}) {{ return {name}({arguments}); }}"
        )
    # the tests' main becomes a function that, run to its end, returns the key the marker is masked with: a
    # program that jumps past the tests, or a forked copy of the process, has no key to print it with
    key = secrets.token_bytes(8)
    masked, _ = _masked(marker, key)
    tests_function = _CPP_MAIN.sub(
        f"__attribute__((noipa)) static unsigned long long {CPP_TESTS_FUNCTION}()", main + rest, count=1
    )
    tests_function = f"{tests_function[:-1]}    return {int.from_bytes(key, 'little')}ULL;\n}}"
    checks = """#include <cstdio>
#include <unistd.h>
#undef assert
static void diffugrpo_failed(int line) {
    std::fprintf(stderr, "assertion failed (tests line %d)\\n", line);
    // the process ends by the exit_group call itself: no signal a program's handler could catch and return from
#if defined(__x86_64__)
    __asm__ volatile("syscall" : : "a"(231L), "D"(1L) : "rcx", "r11", "memory");
#elif defined(__aarch64__)
    register long number __asm__("x8") = 94, status __asm__("x0") = 1;
    __asm__ volatile("svc #0" : : "r"(number), "r"(status) : "memory");
#endif
    __builtin_trap();
}
#define assert(condition) ((condition) ? (void)0 : diffugrpo_failed(__LINE__))"""
    runner = f"""int main() {{
    const long process = getpid();
    const unsigned long long key = {CPP_TESTS_FUNCTION}();
    if (getpid() != process) return 1;
    static volatile const unsigned char masked[] = {{{masked}}};
    char line[{len(marker) + 1}] = {{0}};
    for (int at = 0; at < {len(marker)}; ++at) line[at] = (char)(masked[at] ^ (unsigned char)(key >> (8 * (at % 8))));
    std::printf("\\n%s\\n", line);
    std::fflush(stdout);
    return 0;
}}"""
    program = _joined(prelude, code, *wrappers)
    tests_source = _joined(prelude, checks, declarations, tests_function, runner)
    compiler = shlex.quote(resolved_tool("g++") or "g++")
    flags = " ".join(CPP_FLAGS)
    header = precompiled_stdcpp() if STDCPP in prelude else None
    if header is not None:  # MultiPL-E's prelude includes it first anyway: the same code, compiled 4x faster
        flags += f" -I{shlex.quote(header)} -include {STDCPP}"
    # the program compiles alone, in a job whose work dir holds its source only: the tests are written by the
    # next job, so no `#include`, `.incbin` or path (/proc/self/cwd, the work dir's) reaches them
    compile_command = _script(
        # -fno-gnu-unique: the compiler's own "unique" symbols (static locals of inline code) come out weak, which
        # the localisation below handles; a program that writes one itself is refused after it
        f"{compiler} {flags} -fno-gnu-unique -Dmain=diffugrpo_program_main -c solution.cpp -o solution.o",
        "rm -f solution.cpp",
    )
    link_command = _script(
        f"{compiler} {flags} -c tests.cpp -o tests.o",
        # the program keeps as global only the entries the tests call, and its weak copies of inline and template
        # code the tests define too (merged by the linker: the tests' copy, linked first, is kept); anything
        # else it defines (memcmp, a template instance as a strong or unique symbol, ...) becomes local
        "nm -g -j --defined-only tests.o > defined",
        "echo diffugrpo_keeps_nothing > kept",  # objcopy refuses an empty list
        f"nm -g -j --defined-only solution.o | grep -x '{CPP_ENTRY}[0-9]*' >> kept || true",
        "nm -g --defined-only solution.o | sed -n 's/^[0-9a-f]* [VW] //p' | grep -Fx -f defined >> kept || true",
        "objcopy --keep-global-symbols=kept solution.o",
        "if nm -g -j --defined-only solution.o | grep -vxF -f kept > leftover; then"
        ' echo "error: the program defines a global symbol it may not: $(head -c 300 leftover)" >&2; exit 1; fi',
        "rm -f leftover",
        f"{compiler} -o solution tests.o solution.o",
        "rm -f tests.cpp solution.o tests.o defined kept",
    )
    return Harness(
        (("solution.cpp", program),),
        compile_command,
        ("./solution",),
        marker,
        (header,) if header else (),
        link_command,
        (("tests.cpp", tests_source),),
    )


def _cpp_parameter_names(parameters: str) -> list[str]:
    """The names of a declaration's parameters (``std::map<std::string,long> m, long k`` -> ``m, k``)."""
    names, depth, current = [], 0, ""
    for char in parameters + ",":
        depth += {"<": 1, ">": -1}.get(char, 0)
        if char == "," and depth == 0:
            if current.strip() and current.strip() != "void":
                found = re.search(r"([A-Za-z_]\w*)\s*(?:\[\s*\])?\s*$", current)
                if found is None:
                    raise ValueError(f"C++ tests declare a parameter without a name: {current.strip()!r}")
                names.append(found.group(1))
            current = ""
        else:
            current += char
    return names


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
            [compiler, f"-std={CPP_STANDARD}", "-H", "-E", "-x", "c++", "-"],
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
            command = [compiler, *CPP_FLAGS, "-x", "c++-header", header, "-o", str(folder / f"{STDCPP}.gch")]
            subprocess.run(command, capture_output=True, timeout=300, check=True)
            # the header beside its precompiled form: a later `#include` of it (the prelude's) finds it here
            (folder / STDCPP).symlink_to(header)
            for path in (folder, folder / "bits", folder / f"{STDCPP}.gch"):  # readable by the sandbox's uids
                path.chmod(0o755 if path.is_dir() else 0o644)

        target = diffugrpo_home().resolve() / "pch" / key
        if any(target.is_relative_to(hidden) for hidden in SANDBOX_OWN_DIRS):
            return None  # the sandbox mounts its own folder there: a header bound there would not be seen
        return str(build_once(target, build))
    except (OSError, subprocess.SubprocessError, StopIteration) as error:
        logger.warning("no precompiled <%s> (%s): C++ compiles parse it each time", STDCPP, error)
        return None


def _java(language: Language, prelude: str, code: str, tests: str, marker: str):
    masked, mask = _masked(marker, secrets.token_bytes(len(marker)))
    imports = "\n".join(f"import {package}.{name};" for package, names in JAVA_TYPES.items() for name in names)
    tests_class = java_main_class(tests)
    opening = _JAVA_MAIN_OPENING.search(tests)
    if opening is None:
        raise ValueError("Java tests must be a class whose `public static void main(String[] args)` runs them")
    # the tests run once, called by the runner's main itself: their stack is then exactly theirs over the
    # runner's. Entered again from the program's code (a rerun to read their failures as an oracle), from
    # another thread or from their own static initialiser, it is deeper or starts elsewhere, and the process
    # ends. The caller is compared as a class, not a name: a class of the runner's name that the program compiles
    # and loads at run time is another class (its own loader), and the walk shows reflection and hidden frames
    # (method handles), so a call through them is deeper. The rule holds no state a program could reset (a
    # counter, a flag: reflection writes any field).
    guard = (
        "java.util.List<StackWalker.StackFrame> diffugrpoCallers = StackWalker.getInstance(java.util.Set.of("
        "StackWalker.Option.RETAIN_CLASS_REFERENCE, StackWalker.Option.SHOW_REFLECT_FRAMES,"
        " StackWalker.Option.SHOW_HIDDEN_FRAMES)).walk(diffugrpoFrames -> diffugrpoFrames.limit(3)"
        ".collect(java.util.stream.Collectors.toList()));"
        " if (diffugrpoCallers.size() != 2 || diffugrpoCallers.get(1).getDeclaringClass()"
        f" != {JAVA_RUNNER_CLASS}.class) Runtime.getRuntime().halt(1);"
    )
    guarded = f"{tests[: opening.end()]}\n        {guard}{tests[opening.end() :]}"
    runner = f"""{imports}
public class {JAVA_RUNNER_CLASS} {{
    public static void main(String[] args) throws Throwable {{
        Class.forName("{tests_class}", false, {JAVA_RUNNER_CLASS}.class.getClassLoader());
        new File("classes/{tests_class}.class").delete();
        new File("classes/{JAVA_RUNNER_CLASS}.class").delete();
        {tests_class}.main(args);
        int[] masked = {{{masked}}}, mask = {{{mask}}};
        char[] line = new char[{len(marker)}];
        for (int at = 0; at < {len(marker)}; at++) line[at] = (char) (masked[at] ^ mask[at]);
        System.out.print("\\n" + new String(line) + "\\n");
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }}
}}"""
    program = _joined(prelude, code)
    files = (
        (language.source_file(program), program),
        (f"{tests_class}.java", _joined(imports, prelude, guarded)),
        (f"{JAVA_RUNNER_CLASS}.java", runner),
    )
    names = [name for name, _ in files]
    compile_command = _script(shlex.join(_command(language.compile[:-1], "") + names), f"rm -f {shlex.join(names)}")
    return Harness(files, compile_command, tuple(_command(language.run, "", JAVA_RUNNER_CLASS)), marker)


def _javascript(language: Language, prelude: str, code: str, tests: str, marker: str):
    masked, mask = _masked(marker, secrets.token_bytes(len(marker)))
    solution = language.source_name
    hidden = json.dumps(list(JS_HIDDEN_MODULES))
    runner = f""""use strict";
const fs = require("fs"), path = require("path"), vm = require("vm"), {{ builtinModules }} = require("module");
const program = fs.readFileSync("{solution}", "utf8"), tests = fs.readFileSync("{JS_TESTS_FILE}", "utf8");
for (const name of ["{solution}", "{JS_TESTS_FILE}", __filename]) fs.unlinkSync(name);
{JS_BUILTINS_GUARD}{JS_CLEAN_ASSERT}const hidden = new Set({hidden});
const programRequire = (name) => {{
    const bare = String(name).replace(/^node:/, "");
    if (!builtinModules.includes(bare) || hidden.has(bare.split("/")[0])) {{
        throw new Error(`module ${{name}} is not available here (the library's own modules only)`);
    }}
    return require(name);
}};
// console.assert in the tests (HumanEval-X's) fails the tests, as a check must; the rest is node's console
const testsConsole = Object.freeze(Object.assign(Object.create(console), {{
    assert: (value, ...message) => {{ if (!value) throw new realAssert.AssertionError({{ message: message.join(" ") || "console.assert" }}); }},
}}));
const testsRequire = (name) => (name === "assert" || name === "node:assert" ? assert
    : name === "assert/strict" || name === "node:assert/strict" ? assert.strict : require(name));
process.on("SIGUSR1", () => {{}});
for (const name of ["binding", "_linkedBinding", "dlopen", "getBuiltinModule", "mainModule"]) delete process[name];
const programModule = {{ exports: {{}}, filename: path.resolve("{solution}") }};
Object.assign(globalThis, {{ require: programRequire, module: programModule, exports: programModule.exports,
    __filename: programModule.filename, __dirname: process.cwd() }});
vm.runInThisContext(program, {{ filename: "{solution}" }});
restoreBuiltins();
const testsWrapper = "(function (require, console, " + builtinNames.join(", ") + ") {{ \\"use strict\\";\\n" + tests +
    "\\n}})";
vm.runInThisContext(testsWrapper, {{ filename: "{JS_TESTS_FILE}" }})(testsRequire, testsConsole, ...builtinValues);
// the marker once nothing is left to run: an async test's checks after an `await` run first (a failed one is an
// unhandled rejection, which ends the process with an error)
process.once("beforeExit", () => {{
    const masked = [{masked}], mask = [{mask}];
    fs.writeSync(1, "\\n" + String.fromCharCode(...masked.map((byte, at) => byte ^ mask[at])) + "\\n");
    process.exit(0);
}});
"""
    files = ((solution, _joined(prelude, code)), (JS_TESTS_FILE, tests), (JS_RUNNER_FILE, runner))
    node, *script = _command(language.run, JS_RUNNER_FILE)
    # every Buffer starts zeroed: an unsafe allocation would otherwise hand the program the freed memory that
    # held the tests' source the runner read
    return Harness(files, None, (node, "--zero-fill-buffers", *script), marker)
