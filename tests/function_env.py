"""The environment a template gives one of its functions, rendered for a test's own resources:
what the function would find in Lambda once CloudFormation created it, so that a test can run
the built function under exactly that configuration.

    .venv/bin/python tests/function_env.py TEMPLATE_JSON LOGICAL_ID VALUES_JSON

TEMPLATE_JSON is a template in the long JSON form (infra/standalone_template.py writes one);
LOGICAL_ID an `AWS::Lambda::Function` of it. VALUES maps parameters and logical ids to the
test's values, as tests/iam_policy.py's do, except that a queue's value is its URL (what `Ref`
gives a queue), not its name. A parameter not given takes its `Default`. Prints the variables as
one JSON object of strings.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import iam_policy


class EnvRenderer(iam_policy.Renderer):
    """iam_policy's renderer, with a queue's URL given as its value."""

    def _url(self, logical_id: str) -> str | None:
        value = self.values.get(logical_id, "")
        return value if value.startswith(("http://", "https://")) else None

    def name(self, logical_id: str) -> str:
        url = self._url(logical_id)
        return url.rstrip("/").rsplit("/", 1)[1] if url else super().name(logical_id)

    def ref(self, name: str) -> str:
        return self._url(name) or super().ref(name)


def render(template: dict, logical_id: str, values: dict[str, str]) -> dict[str, str]:
    resource = template["Resources"][logical_id]
    if resource["Type"] != "AWS::Lambda::Function":
        raise SystemExit(f"{logical_id} is a {resource['Type']}, not an AWS::Lambda::Function")
    variables = resource["Properties"].get("Environment", {}).get("Variables", {})
    rendered = EnvRenderer(template, values).resolve(variables)
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in rendered.items()}


def main() -> None:
    if len(sys.argv) != 4:
        raise SystemExit("usage: function_env.py TEMPLATE_JSON LOGICAL_ID VALUES_JSON")
    template = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    json.dump(render(template, sys.argv[2], json.loads(sys.argv[3])), sys.stdout)


if __name__ == "__main__":
    main()
