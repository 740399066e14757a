"""docs/actions.md gives every action's input with an example, and every example is valid input.

The examples are what a user copies; each is validated with the action's own input model (the one every
entry point uses), so a renamed field or a wrong shape in the docs fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from connector_ops import invoke
from connector_ops.environment import resources_for
from connector_ops.kernel.notices import warnings_to
from connector_ops.registry import ACTIONS, load_all

DOC = Path(__file__).resolve().parent.parent / "docs" / "actions.md"
_BLOCK = re.compile(r"```json\n(.*?)```", re.DOTALL)


def examples() -> dict[str, list[dict]]:
    """action name -> its JSON examples (a heading naming two actions gives one block to each)."""
    found: dict[str, list[dict]] = {}
    for section in DOC.read_text().split("\n### ")[1:]:
        heading, _, body = section.partition("\n")
        names = re.findall(r"`([a-z]+\.[a-z_]+)`", heading)
        blocks = [json.loads(b) for b in _BLOCK.findall(body)]
        assert names and blocks, f"section {heading!r} needs an action name and a JSON example"
        if len(names) == len(blocks):
            for name, block in zip(names, blocks, strict=True):
                found.setdefault(name, []).append(block)
        else:
            assert len(names) == 1, heading
            found.setdefault(names[0], []).extend(blocks)
    return found


def test_every_action_has_a_valid_example() -> None:
    load_all()
    documented = examples()
    assert set(documented) == set(ACTIONS), set(ACTIONS) ^ set(documented)
    for name, blocks in documented.items():
        for block in blocks:
            ACTIONS[name].input_model.model_validate(block)  # raises, naming the field, when the doc is wrong


def test_the_shapes_users_asked_about_are_spelled_out() -> None:
    text = DOC.read_text()
    assert '"rows": [{"virtualFileId"' in text  # Append Rows' shape
    assert "`templateVariables` is **required**" in text and 'write `"{}"`' in text
    assert "`report-copy.csv`" in text


def test_the_query_example_finds_rows_of_the_shipped_sales_file(env: dict[str, str]) -> None:
    """The Query example is run, not only validated: it once compared text with a number and found nothing."""
    sales = Path(__file__).resolve().parent.parent / "pipelines" / "data" / "sales.csv"
    platform_file = resources_for(["platform_files"])["platform_files"].add_file(str(sales)).to_json()
    vf = invoke("etl.push", {"platformFile": platform_file})["virtualFileId"]
    example = {**examples()["etl.query"][0], "virtualFileId": vf}
    heard: list[str] = []
    with warnings_to(heard.append):
        rows = invoke("etl.query", example)["result"]
    assert heard == [] and len(rows) == 55
    assert {(row["region"], row["status"]) for row in rows} == {("North", "paid"), ("North", "refunded")}


def test_every_input_field_is_named_in_its_actions_section() -> None:
    """An extension field (drive.create_folder's ``ifExists``) was once left out: every field of every input
    model appears in the section of its action, in an example or the text."""
    load_all()
    sections = {name: section for section in DOC.read_text().split("\n### ")[1:]
                for name in re.findall(r"`([a-z]+\.[a-z_]+)`", section.partition("\n")[0])}
    missing = [f"{name}.{info.alias or field}" for name, spec in ACTIONS.items()
               for field, info in spec.input_model.model_fields.items()
               if f'"{info.alias or field}"' not in sections[name] and f"`{info.alias or field}`" not in sections[name]]
    assert missing == []
