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
import re
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


class Intrinsics:
    """Resolves `Ref`, `Fn::GetAtt`, `Fn::Sub` (with `${!Literal}`) and `Fn::Join` in a
    template's long JSON form. A subclass says what a name is: `ref(name)` and
    `get_att(logical_id, attribute)` (the demo's stack script: the resources it created; the
    tests' policy renderer: the test's own resources)."""

    def ref(self, name: str):
        raise NotImplementedError

    def get_att(self, logical_id: str, attribute: str):
        raise NotImplementedError

    def sub(self, value) -> str:
        text, variables = (value, {}) if isinstance(value, str) else value

        def one(match: re.Match) -> str:
            key = match.group(1)
            if key.startswith("!"):
                return "${" + key[1:] + "}"
            if key in variables:
                return str(self.resolve(variables[key]))
            if "." in key and not key.startswith("AWS::"):
                return str(self.get_att(*key.split(".", 1)))
            return str(self.ref(key))

        return re.sub(r"\$\{([^}]+)\}", one, text)

    def resolve(self, node):
        if isinstance(node, list):
            return [self.resolve(n) for n in node]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (key, value), = node.items()
            if key == "Ref":
                return self.ref(value)
            if key == "Fn::GetAtt":
                return self.get_att(*value)
            if key == "Fn::Sub":
                return self.sub(value)
            if key == "Fn::Join":
                return value[0].join(str(v) for v in self.resolve(value[1]))
        return {k: self.resolve(v) for k, v in node.items()}


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
