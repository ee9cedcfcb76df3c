"""The config checked against ``workflow/schemas/config.schema.yaml`` and said in one
line naming the study and the field (Snakemake's own validation prints the whole config),
as dlbench.study says its own problems; keys a YAML file gives twice; system labels typed
as digits taken as their text. Used by the workflow (``common.smk``) and ``dlbench list``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from dlbench import axes


class WorkflowConfigError(ValueError):
    """A config problem found while planning jobs, said in one line."""


def validate_config(config: Mapping[str, Any], schema_path: Path) -> None:
    """The config against workflow/schemas/config.schema.yaml, its first problem in one
    line naming the field (Snakemake's own validation prints the whole config): a study's
    as dlbench.study says them, "study 's1': grid.batch_size: must be an integer or a list
    of integers, got '8'". A system label given as digits is taken as its text
    (``label_text``), in ``config`` itself when it can be changed."""
    import jsonschema
    import yaml

    config = label_text(config)
    schema = yaml.safe_load(schema_path.read_text())
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(dict(config)))
    if error is None:
        return
    where = _where(config, list(error.absolute_path))
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        allowed = set(error.schema.get("properties") or {})
        extra = sorted(str(k) for k in error.instance if k not in allowed)
        if extra:
            valid = ", ".join(sorted(allowed))
            raise WorkflowConfigError(f"{where}: unknown key {extra[0]!r} (valid: {valid})")
    message = _schema_message(error)
    message = message if len(message) <= 200 else message[:200] + " ..."
    raise WorkflowConfigError(f"{where}: {message}")


# Config keys that name a system (dlbench.systems): Snakemake reads --config system=2024 as
# the integer 2024, though a label may be all digits.
LABEL_KEYS = ("system", "baseline_system")


def label_text(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """``config`` with an integer system label as its text (2024 -> '2024'), changed in
    place where it can be, so that the workflow's later checks and its results folder see
    the label as given. Only integers: a float or a boolean does not give back the text
    typed (1.50 is 1.5, yes is true), and is refused by the schema as it is."""
    fixed = {key: str(config[key]) for key in LABEL_KEYS
             if isinstance(config.get(key), int) and not isinstance(config.get(key), bool)}
    if not fixed:
        return config
    if isinstance(config, MutableMapping):
        config.update(fixed)
        return config
    return {**config, **fixed}


def _where(config: Any, path: list[Any]) -> str:
    """A schema error's place as the config's errors name it: "study 's1': grid.batch_size"
    for a study's field (dlbench.study's form), else the keys joined by dots ("config" for
    the whole); list items as [i]."""
    study_name = None
    if len(path) >= 2 and path[0] == "studies":
        study_name, path = path[1], path[2:]
        config = config["studies"][study_name]
    field = ""
    for part in path:
        # An item of a list, not a key (a YAML key may be a number too).
        if isinstance(config, list):
            field += f"[{part}]"
        else:
            field += f".{part}" if field else str(part)
        config = config[part]
    if study_name is None:
        return field or "config"
    named = f"study {str(study_name)!r}"  # repr: a name with a newline stays on one line
    return f"{named}: {field}" if field else named


_TYPE_WORDS = {"integer": ("an integer", "integers"), "number": ("a number", "numbers"),
               "string": ("a string", "strings"), "boolean": ("a boolean (true or false)", "booleans"),
               "object": ("a mapping", "mappings"), "array": ("a list", "lists"),
               "null": ("null", "nulls")}


def _either(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _expected(schema: Any, plural: bool = False) -> str | None:
    """What a schema accepts in words ("an integer or a list of integers"); None where it
    asks more than types, values and keys can say."""
    if not isinstance(schema, Mapping):
        return None
    for key in ("anyOf", "oneOf"):
        if key in schema:
            parts = [_expected(sub, plural) for sub in schema[key]]
            return None if None in parts or not parts else _either(parts)
    if "enum" in schema:
        values = ", ".join(map(str, schema["enum"]))
        return f"values among ({values})" if plural else f"one of ({values})"
    if "type" not in schema:
        required = schema.get("required")
        if not required:
            return None
        keys = " and ".join(map(str, required))
        return f"mappings with {keys}" if plural else f"a mapping with {keys}"
    words = []
    for name in schema["type"] if isinstance(schema["type"], list) else [schema["type"]]:
        if name not in _TYPE_WORDS:
            return None
        one, many = _TYPE_WORDS[name]
        if name == "array" and "items" in schema:
            items = _expected(schema["items"], plural=True)
            if items is None:
                return None
            one, many = f"a list of {items}", f"lists of {items}"
        words.append(many if plural else one)
    return _either(words)


def _types(schema: Any) -> set[str]:
    """The JSON types a schema takes, its own and those of its anyOf/oneOf branches."""
    if not isinstance(schema, Mapping):
        return set()
    own = schema.get("type", [])
    types = set([own] if isinstance(own, str) else own)
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key, []):
            types |= _types(branch)
    return types


def _schema_message(error: Any) -> str:
    """The problem of a schema error: for a value of the wrong type (alone or in every
    branch of an anyOf/oneOf) what is valid and what was given, as dlbench.study says it
    ("must be an integer or a list of integers, got '8'"), with how to write text that
    reads as a number (``number_text_hint``); else jsonschema's own words."""
    got = repr(error.instance)
    got = got if len(got) <= 80 else got[:80] + " ..."
    if isinstance(error.instance, bool) and "string" in str(error.schema):
        got += axes.YAML_BOOLEAN_HINT
    types = _types(error.schema)
    if types & {"number", "integer"}:
        got += number_text_hint(error.instance, integer="number" not in types)
    if error.validator in ("anyOf", "oneOf"):
        branches = [_expected(sub) for sub in error.validator_value]
        if None not in branches:
            if error.validator == "oneOf" and not error.context:  # valid under several
                return f"must be exactly one of: {'; '.join(branches)}, got {got}"
            return f"must be {_either(branches)}, got {got}"
    if error.validator == "type":
        expected = _expected({"type": error.validator_value})
        if expected:
            return f"must be {expected}, got {got}"
    return error.message


def number_text_hint(value: Any, integer: bool = False) -> str:
    """For text that reads as a number (PyYAML, YAML 1.1, reads 1e9 as text: its floats need
    a dot and a signed exponent; or a number quoted): how to write it so that YAML reads a
    number, " (YAML reads it as text: write 1000000000 or 1.0e+9, unquoted)"; else "".
    ``integer``: a field that takes integers only, so only an integer is offered."""
    import yaml

    if not isinstance(value, str):
        return ""
    try:
        number = float(value)
    except ValueError:
        return ""
    if not math.isfinite(number):  # nan, inf: refused as numbers too
        return ""
    mantissa, e, exponent = value.strip().replace("E", "e").partition("e")
    if e and "." not in mantissa:
        mantissa += ".0"
    if e and exponent[:1] not in ("+", "-"):
        exponent = "+" + exponent
    plain = str(int(number)) if number.is_integer() and abs(number) < 1e16 else None
    floats = () if integer else (mantissa + e + exponent, repr(number))
    candidates = dict.fromkeys(f for f in (plain, *floats) if f)
    # only the forms PyYAML itself reads back as this number
    forms = [f for f in candidates if _yaml_number(yaml.safe_load(f)) == number]
    if not forms:
        return ""
    return f" (YAML reads it as text: write {' or '.join(forms[:2])}, unquoted)"


def _yaml_number(value: Any) -> float | None:
    return None if isinstance(value, bool) or not isinstance(value, int | float) else value


def duplicate_keys(path: Path) -> list[str]:
    """Keys a YAML file gives twice in one mapping (YAML keeps the last one silently: a
    study pasted twice under one name loses the first): one line each."""
    import yaml

    found: list[str] = []

    def construct_mapping(loader, node, deep=False):
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=True)
            if isinstance(key, str | int) and key in seen:
                found.append(f"{path}: line {key_node.start_mark.line + 1}: key {key!r} is "
                             "given twice (the last one wins)")
            seen.add(key)
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    try:
        yaml.load(path.read_text(), Loader=Loader)  # noqa: S506 (a SafeLoader subclass)
    except (OSError, yaml.YAMLError):
        return []  # Snakemake reports an unreadable config itself
    return found
