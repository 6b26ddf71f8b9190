"""What the judge refuses and what the program raised, as the test meets them: the judge's own stops (the
program's process ended, an answer it cannot read, a value it cannot send, a test with no ground truth, a program
method it does not trust), the program's exceptions re-raised as classes of the judge's side, and the names the trust
rule reads (``BUILTIN_METHODS``). Runs inside the sandbox beside :mod:`sandbox_judge`. Standard library only.
"""

from __future__ import annotations

import builtins
import sys

import sandbox_wire as wire

MESSAGE_CHARS = 500


PASSED_DUNDERS = ("__name__", "__qualname__", "__doc__", "__module__", "__dict__")
DYNAMIC_FIELDS = "*fields"  # a reference class's fields named by its caller (rewards.task_code.class_attributes)
CLASS_DUNDERS = ("__mro__", "__bases__", "__base__")  # what a program class (not its objects) is also asked


BUILTIN_NAMES = frozenset(dir(builtins))


# The methods of str and bytes (``startswith``, ``isdigit``, ``split``): asked of a program object whose class the
# task never names, the test expected a string there. (Container methods such as ``add`` or ``get`` are what the
# task's own classes offer too, so those stay the program's.)
BUILTIN_METHODS = frozenset(name for kind in (str, bytes) for name in dir(kind) if not name.startswith("_"))


class ProgramEnded(BaseException):
    """The program's process closed the connection (it exited, crashed or was killed); a BaseException so
    that a test's ``except Exception`` cannot swallow it."""


class FromProgram:
    """Mixed into the exceptions re-raised here for the program, so the verdict can tell them from the test's own."""


_PROGRAM_EXCEPTIONS: dict[tuple[str, str], type] = {}


_TASK_EXCEPTIONS: dict[type, type] = {}  # the judge's own exception class -> its program-marked subclass


# Raised by the program, these would end the test's own iteration or the judge itself (PEP 479's reasoning):
# they arrive as RuntimeError.
_NOT_PASSED_THROUGH = ("StopIteration", "StopAsyncIteration", "GeneratorExit", "SystemExit", "KeyboardInterrupt")


def program_exception_class(type_name: str, base_name: str = "") -> type:
    """The class standing for one of the program's exception classes: named like it, derived from its nearest
    builtin base (so ``except ValueError`` in a test catches its ``BadInput(ValueError)``), one class per name
    (so ``except BadInput`` with the program's class catches it too)."""
    key = (type_name[:100], base_name[:100])
    cls = _PROGRAM_EXCEPTIONS.get(key)
    if cls is None:
        base = getattr(builtins, base_name or type_name, None)
        if not (isinstance(base, type) and issubclass(base, Exception)) or base.__name__ in _NOT_PASSED_THROUGH:
            base = RuntimeError if (base_name or type_name) in _NOT_PASSED_THROUGH else Exception
        try:
            cls = type(key[0], (base, FromProgram), {"__str__": _program_text})
        except TypeError:  # a builtin that cannot be subclassed
            cls = type(key[0], (Exception, FromProgram), {"__str__": _program_text})
        if len(_PROGRAM_EXCEPTIONS) < 1024:
            _PROGRAM_EXCEPTIONS[key] = cls
    return cls


def _program_text(error: BaseException) -> str:
    """``str()`` of the program's exception: the text its own ``__str__`` gave, where it travelled whole (a longer
    one was cut at :data:`MESSAGE_CHARS`: its arguments' text then stands for it)."""
    text = error.__dict__.get(_TEXT_FIELD)
    return text if type(text) is str and len(text) < MESSAGE_CHARS else BaseException.__str__(error)


_TEXT_FIELD = "_diffugrpo_program_text"


def program_exception(
    type_name: str, message: str, base_name: str = "", args: tuple | None = None, fields=None
) -> BaseException:
    """The exception the program raised (see :func:`program_exception_class`), with its arguments where they
    travelled (``e.args[0] == 'x'``), else its message; one its base cannot rebuild (an ``ExceptionGroup``)
    arrives as a plain exception of its name, never as a ``TypeError`` a test might catch."""
    cls = program_exception_class(type_name, base_name)
    for attempt in (
        lambda: cls(*args) if args is not None else cls(message),
        lambda: cls(message),
        lambda: program_exception_class(type_name, "Exception")(message),
    ):
        try:
            error = attempt()
        except Exception:  # noqa: BLE001 - arguments its builtin base refuses
            continue
        _set_fields(error, fields)
        error.__dict__[_TEXT_FIELD] = message
        return error
    return program_exception_class("Exception", "Exception")(message)


def _set_fields(error: BaseException, fields) -> None:
    """The program exception's fields (a ParseError's ``.line``), as data: never a dunder name or a method's."""
    if type(fields) is dict:
        for field, value in fields.items():
            if type(field) is str and not field.startswith("__") and not callable(getattr(type(error), field, None)):
                object.__getattribute__(error, "__dict__")[field] = value


class Unreadable(BaseException):
    """The program's answer could not be read (malformed, or over a limit). A BaseException, like
    :class:`ProgramEnded`: a test's own ``except ValueError`` must never take it for the program's error."""


class Unsendable(BaseException):
    """The test handed the program a value that cannot travel to another process (an open file, a compiled
    pattern, an object of a class the test defines): the test fails saying so, and no ``except TypeError``
    in it can take that for the program's error."""


class NoGroundTruth(BaseException):
    """A check uses a helper the task's own code does not define: asking the program for it would let the program
    define what is right, so the row gets no verdict."""


class Untrusted(BaseException):
    """The test asked a question only the program's own code could answer about a value of the test
    (membership by its ``__contains__``): not trusted, so the test fails saying so."""


_ANSWER_ERRORS = (wire.BadValue, ValueError, TypeError, IndexError, KeyError, AttributeError)


def _readable(read):
    """``read()``, with a malformed answer turned into :class:`Unreadable` (the program's own exceptions pass)."""
    try:
        return read()
    except _ANSWER_ERRORS as error:
        if isinstance(error, FromProgram):
            raise
        raise Unreadable(
            str(error) if isinstance(error, wire.BadValue) else f"malformed answer ({type(error).__name__})"
        ) from None


TEST_FILES = ("<test>", "<preamble>", "<task>")


def _test_method(value) -> bool:
    """A builtin method of one of the test's own values (``table.get``, ``seen.add``): called back here, so the
    program reaches that value only through it, as in one process. Never a module's function (``os.system``)."""
    owner = getattr(value, "__self__", None)
    return (
        type(value).__name__ == "builtin_function_or_method"
        and type(value).__module__ == "builtins"
        and owner is not None
        and not isinstance(owner, type(sys))
        and not isinstance(owner, type)
    )


def _test_function(value) -> bool:
    """A function (or lambda, or bound method of a task object) the test, the preamble or the task's code
    defines: the only callables the program may call back. Never a judge object a program value led to."""
    function = getattr(value, "__func__", value)
    code = getattr(function, "__code__", None) if type(function).__name__ == "function" else None
    return code is not None and code.co_filename in TEST_FILES


def _text(error: BaseException) -> str:
    try:
        return str(error)[:MESSAGE_CHARS]
    except Exception:  # noqa: BLE001
        return "<unprintable>"
