"""A profiler's settings, typed once: name, default, valid values, help.

Each kind of setting checks a config value (one line naming the field, as every profiling
config problem is said) and gives its JSON-schema fragment, so that the check and
``workflow/schemas/config.schema.yaml`` come from the same declaration. The schema only
says what the Snakemake validation already said before these were declared here; the finer
checks (a non-empty optional string, an UPPER_CASE knob name) stay in ``check``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class ProfilingConfigError(ValueError):
    """A problem in the profiling config, said in one line naming the field."""


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    help: str = ""
    nullable: bool = False  # null is a value (e.g. "the cell's own")

    def check(self, field: str, value: Any) -> None:
        if value is None and self.nullable:
            return
        self._check(field, value)

    def _check(self, field: str, value: Any) -> None:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        out = self._schema()
        if self.help:
            out["description"] = self.help
        return out

    def _schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def _type(self, name: str) -> str | list[str]:
        return [name, "null"] if self.nullable else name


@dataclass(frozen=True, kw_only=True)
class Int(Setting):
    minimum: int = 0

    def _check(self, field: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < self.minimum:
            raise ProfilingConfigError(
                f"{field}: must be an integer >= {self.minimum}, got {value!r}")

    def _schema(self) -> dict[str, Any]:
        return {"type": self._type("integer"), "minimum": self.minimum}


@dataclass(frozen=True)
class Str(Setting):
    def _check(self, field: str, value: Any) -> None:
        if not isinstance(value, str) or not value:
            raise ProfilingConfigError(f"{field}: must be a non-empty string, got {value!r}")

    def _schema(self) -> dict[str, Any]:
        if self.nullable:  # an empty string is caught by check, not by the schema
            return {"type": self._type("string")}
        return {"type": "string", "minLength": 1}


@dataclass(frozen=True)
class Bool(Setting):
    def _check(self, field: str, value: Any) -> None:
        if not isinstance(value, bool):
            raise ProfilingConfigError(f"{field}: must be true or false, got {value!r}")

    def _schema(self) -> dict[str, Any]:
        return {"type": self._type("boolean")}


@dataclass(frozen=True, kw_only=True)
class Choice(Setting):
    choices: tuple[str, ...]

    def _check(self, field: str, value: Any) -> None:
        if value not in self.choices:
            raise ProfilingConfigError(
                f"{field}: unknown value {value!r} (valid: {', '.join(self.choices)})")

    def _schema(self) -> dict[str, Any]:
        return {"enum": list(self.choices)}


@dataclass(frozen=True)
class Strings(Setting):
    """A list of non-empty strings (options, metrics, events...). ``required``: the tool
    needs one at least (an empty --trace or --report is the tool's error, after the run)."""

    required: bool = False

    def _check(self, field: str, value: Any) -> None:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ProfilingConfigError(
                f"{field}: must be a list of non-empty strings, got {value!r}")
        if self.required and not value:
            raise ProfilingConfigError(f"{field}: is an empty list; give one value at least "
                                       f"(the default: {', '.join(self.default)})")

    def _schema(self) -> dict[str, Any]:
        # shared with the rest of the config schema
        out: dict[str, Any] = {"$ref": "#/$defs/strings"}
        if self.required:
            out["minItems"] = 1
        return out


@dataclass(frozen=True)
class Names(Strings):
    """A list of names (letters, digits, _), each one a file's name in the profile folder:
    a name is never a path, so nothing is written outside it."""

    def _check(self, field: str, value: Any) -> None:
        super()._check(field, value)
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9_]+", name):
                raise ProfilingConfigError(
                    f"{field}: {name!r} is not a name (letters, digits and _ only)")


@dataclass(frozen=True, kw_only=True)
class Options(Strings):
    """A tool's own command-line options, passed as they are, but for those its module
    refuses: one that chooses where the tool writes, loads code, reads more options from a
    file or sets the profiled process's environment would let a config write outside the
    results or run code of its choosing."""

    refused: Mapping[str, str]  # option (--log-file, -o) -> why
    flags: str = ""  # short options without a value: "-fo x" is "-f -o x"
    # The tool's options that begin a refused one's name (ncu's --section): not abbreviations.
    whole: Collection[str] = ()

    def _check(self, field: str, value: Any) -> None:
        super()._check(field, value)
        problem = self.refusal(value)
        if problem:
            raise ProfilingConfigError(f"{field}: {problem}")

    def refusal(self, words: Sequence[str]) -> str | None:
        """Why the first refused word of ``words`` is refused, or None. Every word counts,
        a value too: a value that reads as a refused option is refused with it. The words
        go before dlbench's own options and the profiled command, so a word that is no
        option's value ("--", or a second plain word in a row) would end the tool's
        options: the rest, dlbench's --output included, would be the program's."""
        previous = None
        for word in words:
            option = self._option(word)
            if option:
                return f"{word!r} is refused: {option} {self.refused[option]}"
            if word == "--":
                return ("'--' is refused: it ends the tool's options, and the profiled "
                        "command and dlbench's own options follow")
            if not word.startswith("-") and not self._takes_value(previous):
                return (f"{word!r} is refused: a word that is no option's value would be "
                        "taken as the program to profile (write an option's value after it, "
                        "or as --option=value)")
            previous = word
        return None

    def _takes_value(self, word: str | None) -> bool:
        """Whether ``word`` is an option that may take the next word as its value: not one
        that holds its value (--set=full), nor short flags alone (ncu's -f)."""
        if word is None or not word.startswith("-") or "=" in word:
            return False
        short = word[1:]
        return word.startswith("--") or not all(letter in self.flags for letter in short)

    def _option(self, word: str) -> str | None:
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            if name in self.refused:
                return name
            if len(name) == 2 or name in self.whole:  # "--" ends the options
                return None
            # A parser may take an unambiguous prefix of a long option (Boost's does, and
            # ncu's help reads as Boost's): --log is --log-file.
            return next((o for o in self.refused if o.startswith(name)), None)
        if not word.startswith("-"):
            return None
        for letter in word[1:]:  # -ox is -o x; after a flag the next letter is an option
            if f"-{letter}" in self.refused:
                return f"-{letter}"
            if letter not in self.flags:
                break
        return None


@dataclass(frozen=True)
class Knobs(Setting):
    """NAME: value pairs, NAME in UPPER_CASE (environment-style knobs: A-Z, 0-9 and _,
    starting with a letter)."""

    def _check(self, field: str, value: Any) -> None:
        if not isinstance(value, Mapping):
            raise ProfilingConfigError(
                f"{field}: must be a mapping of NAME: value, got {value!r}")
        for name, knob in value.items():
            if not (isinstance(name, str) and re.fullmatch(r"[A-Z][A-Z0-9_]*", name)):
                raise ProfilingConfigError(
                    f"{field}: knob name {name!r} must be UPPER_CASE: upper-case letters, "
                    "digits and '_', starting with a letter")
            if isinstance(knob, bool) or not isinstance(knob, (int, float, str)):
                raise ProfilingConfigError(
                    f"{field}.{name}: must be a number or string, got {knob!r}")

    def _schema(self) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": {"type": ["number", "string"]}}


# The profiled run's iterations, shared by the tools that run the cell's own loop: a profile
# needs few iterations, and a tool like ncu replays every kernel it profiles.
NUM_BATCHES = Int("num_batches", None, "Measured iterations of the profiled run (null: the "
                  "cell's own).", nullable=True, minimum=1)
NUM_WARMUP_BATCHES = Int("num_warmup_batches", None, "Warmup iterations of the profiled run "
                         "(null: the cell's own).", nullable=True, minimum=0)
