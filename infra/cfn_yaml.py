"""CloudFormation YAML in its long JSON form: short-form intrinsic tags (`!Ref`, `!GetAtt`,
`!Sub`...) become `{"Ref": ...}`, `{"Fn::GetAtt": [...]}`, `{"Fn::Sub": ...}`.

Shared by the infra tests (infra/tests/support.py) and the demo's stack script
(scripts/demo_stack.py): both read infra/templates/*.yaml the way CloudFormation does.
"""

from __future__ import annotations

from pathlib import Path

import yaml


class _CfnLoader(yaml.SafeLoader):
    pass


def _intrinsic(loader: yaml.Loader, tag_suffix: str, node: yaml.Node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if tag_suffix == "Ref":
        return {"Ref": value}
    if tag_suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{tag_suffix}": value}


_CfnLoader.add_multi_constructor("!", _intrinsic)


def loads(text: str) -> dict:
    """A template's text in the long JSON form."""
    return yaml.load(text, Loader=_CfnLoader)  # noqa: S506 - SafeLoader subclass


def load(path: Path) -> dict:
    """A template file in the long JSON form."""
    return loads(Path(path).read_text(encoding="utf-8"))
