"""What gpupipe's command lines share: errors in one form.

A bad argument, or a user mistake found later (a missing folder, a file
where a folder belongs, a truncated shard, a pack that cannot be reached),
ends a command with one line on stderr, ``error: ...``, and exit status 2,
never a traceback. ``python -m gpupipe.pack`` and the examples use this; so can
your own training script (``gpupipe.cli.run(main)``, ``gpupipe.cli.ArgumentParser``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

#: The exit status of a command stopped by an error (as argparse's).
EXIT_ERROR = 2
#: A message that names a file: a path, or a name with an extension.
_NAMES_A_FILE = re.compile(r"[/\\]|\w\.\w{2,5}\b")


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``argparse.ArgumentDefaultsHelpFormatter`` that says a default once: not after a help that says it
    already (``... (default: DATA)``), and not when it is ``None``."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "(default" in text or action.default is None:
            return text
        return super()._get_help_string(action)


def unbroken_names(formatter: type[argparse.HelpFormatter]) -> type[argparse.HelpFormatter]:
    """``formatter`` whose option help is wrapped between words only, never at a hyphen inside one (argparse's
    wrapping printed ``baseline,dali,dali-`` / ``cpu,torchvision`` and ``./bench-`` / ``out``: a backend or
    folder name cut in two). A formatter that keeps its own line breaks (``RawTextHelpFormatter``) is kept."""
    if formatter._split_lines is not argparse.HelpFormatter._split_lines or getattr(formatter, "_unbroken", False):
        return formatter

    class Unbroken(formatter):  # type: ignore[valid-type,misc]
        _unbroken = True

        def _split_lines(self, text: str, width: int) -> list[str]:
            import textwrap

            return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    Unbroken.__name__ = Unbroken.__qualname__ = formatter.__name__
    return Unbroken


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line, ``error: ...`` (exit 2), without the usage; a
    mistyped flag is named with the flag meant (``--batchsize 8 (did you mean --batch-size?)``).

    With ``formatter_class=argparse.ArgumentDefaultsHelpFormatter``, ``--help`` shows every option's default
    once, options without a help text included (``DefaultsHelpFormatter``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("formatter_class") is argparse.ArgumentDefaultsHelpFormatter:
            kwargs["formatter_class"] = DefaultsHelpFormatter
        kwargs["formatter_class"] = unbroken_names(kwargs.get("formatter_class", argparse.HelpFormatter))
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        shown = not any(action.default is v for v in (None, False, argparse.SUPPRESS))  # 0 is a default (0 == False)
        ours = isinstance(self.formatter_class, type) and issubclass(self.formatter_class, DefaultsHelpFormatter)
        if ours and action.help is None and shown:
            action.help = "(default: %(default)s)"
        return action

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        # An empty value ("$DATA" with DATA unset) is refused, naming the argument: as a path it would be read as
        # the current folder (a pack written into it, a demo set made there). An option whose default is "" takes it.
        if isinstance(arg_string, str) and not arg_string.strip() and action.default != "":
            raise argparse.ArgumentError(action, empty_value(arg_string))
        return super()._get_value(action, arg_string)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self.argv = [str(a) for a in (sys.argv[1:] if args is None else args)]  # for error(): a name such as -data
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        fail(f"{explained(self, message)} (see {self.prog} --help)")


def empty_value(value: str) -> str:
    """What an ``error:`` line says of an empty argument (``--data "$DATA"``, the variable unset)."""
    return f"empty ({value!r}: an unset shell variable?); pass a value (. for the current folder)"


def explained(parser: argparse.ArgumentParser, message: str) -> str:
    """argparse's ``message`` with what the user meant: the flag meant for a mistyped one (``with_flag_guess``),
    the choice meant for a mistyped one (``with_choice_guess``: ``invalid choice: 'dali_cpu' (did you mean
    'dali-cpu'?)``), else, for a folder or file whose name starts with ``-`` (read as a flag: ``unrecognized
    arguments: -data``), how to write it (``./-data``, or ``--`` before the names). The words are those
    ``parse_args`` was given (``ArgumentParser`` keeps them)."""
    guessed = with_choice_guess(with_flag_guess(parser, message))
    if guessed != message:
        return guessed
    return message + dash_names_hint(parser, message, getattr(parser, "argv", None) or [])


#: argparse's messages where a name that starts with ``-`` may be a folder or file read as a flag.
_DASH_MESSAGES = re.compile(
    r"^(unrecognized arguments: |the following arguments are required: |argument \S+: (expected one argument"
    r"|ignored explicit argument))"
)


def dash_names_hint(parser: argparse.ArgumentParser, message: str, argv: list[str]) -> str:
    """The end of an argparse error caused by a folder or file named ``-data`` (read as a flag): ``"(a name that
    starts with '-' is read as a flag: for a folder or file so named, write ./-data, or put -- before the
    names)"``; for an option's value (``--data -d``: ``expected one argument``), ``write --data ./-d``. ``""``
    where no word of ``argv`` can be such a name."""
    if not _DASH_MESSAGES.match(message):
        return ""
    flags = {flag for action in parser._actions for flag in action.option_strings}
    shorts = {flag[1] for flag in flags if len(flag) == 2 and flag[0] in parser.prefix_chars}
    given = argv[: argv.index("--")] if "--" in argv else argv

    def named(word: str) -> bool:  # a name read as a flag: -data, not a flag, -qv (short flags), -1 or --x=1
        return (
            len(word) > 1
            and word[0] == "-"
            and word[1] != "-"
            and word not in flags
            and not set(word[1:]) <= shorts
            and parser._negative_number_matcher.match(word) is None
        )

    wanted = re.match(r"argument (\S+): expected one argument", message)
    if wanted:
        options = wanted.group(1).split("/")
        meant = [k for k in given if k in options or (k[:2] == "--" and any(o.startswith(k) for o in options))]
        after = [v for k, v in zip(given, given[1:]) if k in meant and named(v)]  # --data -d, --dat -d
        return f"{_READ_AS_FLAG}a folder or file so named, write {options[-1]} ./{after[0]})" if after else ""
    names = [word for word in given if named(word)]
    if not names or all(action.option_strings for action in parser._actions):  # no folder or file to name
        return ""
    what = "a folder or file" if len(names) == 1 else "folders or files"
    return f"{_READ_AS_FLAG}{what} so named, write {' '.join('./' + n for n in names)}, or put -- before the names)"


_READ_AS_FLAG = " (a name that starts with '-' is read as a flag: for "


def with_flag_guess(parser: argparse.ArgumentParser, message: str) -> str:
    """argparse's ``message``, with the flag meant for a mistyped one: ``unrecognized arguments: --batchsize 8
    (did you mean --batch-size?)``. (A prefix of a flag is taken as that flag already, as argparse does.)"""
    from .checks import did_you_mean

    prefix = "unrecognized arguments: "
    if not message.startswith(prefix):
        return message
    flags = [flag for action in parser._actions for flag in action.option_strings]
    for word in message[len(prefix) :].split():
        guess = did_you_mean(word.split("=", 1)[0], flags, quote=False) if word.startswith("-") else ""
        if guess:
            return message + guess
    return message


#: argparse's message for a value not among an option's choices.
_INVALID_CHOICE = re.compile(r"^(argument \S+: invalid choice: )('(?:[^'\\]|\\.)*') \(choose from (.*)\)$")


def with_choice_guess(message: str) -> str:
    """argparse's ``invalid choice`` ``message`` with the choice meant: one close to the value typed, case and
    ``_``/``-`` aside, or the one it begins (``seg`` for ``segmentation``): ``argument --backend: invalid choice:
    'dali_cpu' (did you mean 'dali-cpu'?); choose from 'auto', 'dali', ...``. Other messages are returned as
    they are."""
    import ast

    from .checks import did_you_mean

    found = _INVALID_CHOICE.match(message)
    if not found:
        return message
    try:
        given = ast.literal_eval(found.group(2))
        choices = [ast.literal_eval(c.strip()) for c in found.group(3).split(",")]
    except (ValueError, SyntaxError):  # a choice holding ", ": leave argparse's message
        return message
    if not isinstance(given, str) or not all(isinstance(c, str) for c in choices):
        return message
    folded = {c.lower().replace("_", "-"): c for c in choices}
    key = given.lower().replace("_", "-")
    starting = [c for f, c in folded.items() if key and f.startswith(key)]
    if key in folded:
        guess = f" (did you mean {folded[key]!r}?)"
    elif len(starting) == 1:
        guess = f" (did you mean {starting[0]!r}?)"
    else:
        guess = did_you_mean(given, choices)
    if not guess:
        return message
    return f"{found.group(1)}{found.group(2)}{guess}; choose from {found.group(3)}"


def fail(message: str) -> NoReturn:
    """Ends the command: ``error: <message>`` on stderr, exit status 2."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_ERROR)


def user_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that report a user's mistake or the state of the data: gpupipe's own
    ([`gpupipe.Error`][gpupipe.Error]), and the ``ValueError`` / ``OSError`` / ``ImportError`` its argument and
    file checks raise. With ``GPUPIPE_DEBUG=1`` none is caught: the traceback shows where it came from."""
    from .errors import Error

    if os.environ.get("GPUPIPE_DEBUG") == "1":
        return ()
    return Error, ValueError, OSError, ImportError


def message(err: BaseException) -> str:
    """The text of ``err`` for an ``error:`` line; an error re-raised from a ``DataLoader`` worker
    (whose text holds the worker's traceback) gives the worker's own message, and, where that names no file
    (a decoder's ``Truncated File Read``), which worker raised it and that ``GPUPIPE_DEBUG=1`` shows where."""
    text = str(err) or type(err).__name__
    if "Original Traceback" in text:
        lines = text.strip().splitlines()
        last = lines[-1]
        worker = re.search(r"in (DataLoader worker process \d+)", lines[0])
        text = last.split(": ", 1)[1] if ": " in last else last
        if worker and not _NAMES_A_FILE.search(text):
            text += f" (in {worker.group(1)}; GPUPIPE_DEBUG=1 shows its traceback)"
    return text


def run(main: Callable[[], int | None]) -> NoReturn:
    """Runs a command's ``main()`` and exits with its status; a user error (``user_errors``)
    ends it with one ``error:`` line and status 2."""
    try:
        status = main()
    except user_errors() as err:
        fail(message(err))
    raise SystemExit(status or 0)


__all__ = [
    "EXIT_ERROR",
    "ArgumentParser",
    "empty_value",
    "explained",
    "fail",
    "with_choice_guess",
    "message",
    "run",
    "user_errors",
]
