"""Every config the project ships passes the workflow's JSON schema and expands to cells."""

from pathlib import Path

import jsonschema
import pytest
import yaml

from dlbench import study

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted([REPO / "config" / "config.yaml", *(REPO / "config" / "examples").glob("*.yaml")])
SCHEMA = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_is_valid(path, tmp_path):
    config = yaml.safe_load(path.read_text())
    jsonschema.validate(config, SCHEMA)
    for spec in (config.get("datasets") or {}).values():
        if "path" in spec:  # a user's ImageFolder: stands in for the path in the example
            spec["path"] = str(tmp_path)
    cells = study.expand_config(config)
    assert cells and len({(c.study, c.id) for c in cells}) == len(cells)


def test_a_config_breaking_the_schema_is_caught():
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"studies": {"s": {"grid": {"model": "x"}}}, "colour": 1}, SCHEMA)
