"""CloudFormation YAML in its long JSON form: short-form intrinsic tags (`!Ref`, `!GetAtt`,
`!Sub`...) become `{"Ref": ...}`, `{"Fn::GetAtt": [...]}`, `{"Fn::Sub": ...}`.

Shared by the infra tests (infra/tests/support.py) and the demo's stack script
(scripts/demo_stack.py): both read infra/templates/*.yaml the way CloudFormation does.

`make deploy` sends a template as compact JSON (`python infra/cfn_yaml.py compact IN OUT`): the
same template without its comments, indentation and short-form tags (infra/README.md,
"Template size").
"""

from __future__ import annotations

import json
import sys
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


# CloudFormation refuses a CreateStack/UpdateStack TemplateBody above this many bytes.
TEMPLATE_BODY_LIMIT = 51_200


def compact(template: dict) -> str:
    """A template (long JSON form) as the shortest JSON text CloudFormation reads: no spaces,
    non-ASCII kept as UTF-8."""
    return json.dumps(template, separators=(",", ":"), ensure_ascii=False)


def main(argv: list[str]) -> int:
    """`compact IN OUT`: IN (YAML or JSON) as compact JSON in OUT."""
    if len(argv) != 3 or argv[0] != "compact":
        print("usage: cfn_yaml.py compact IN OUT", file=sys.stderr)
        return 2
    Path(argv[2]).write_bytes(compact(load(Path(argv[1]))).encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
