"""Tool definitions as agents produce them: pydantic's ``model_json_schema``, zod through
``zod-to-json-schema`` and MCP servers' ``tools/list`` (tests/models/agent_tools/; the
JavaScript files there made the JSON from the npm packages named in it).

None is refused or relaxed for an annotation (titles, defaults, descriptions,
``additionalProperties``, ``$schema``, discriminators…), and forced calls of every one
with the real SmolLM2 parse and validate under the reference ``jsonschema`` library.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.structured import plan_schema
from tests.models.agent_tools.pydantic_tools import pydantic_tools

HERE = Path(__file__).parent / "agent_tools"


def agent_tools() -> dict[str, tuple[str, dict]]:
    """{"source/name": (description, parameters schema)} for every agent tool."""
    tools = {f"pydantic/{name}": ("", schema) for name, schema in pydantic_tools().items()}
    zod = json.loads((HERE / "zod_tools.json").read_text(encoding="utf-8"))
    tools.update({f"zod/{name}": ("", schema) for name, schema in zod.items()})
    mcp = json.loads((HERE / "mcp_tools.json").read_text(encoding="utf-8"))
    for server, listed in mcp.items():
        tools.update({f"mcp-{server}/{t['name']}": (t["description"], t["inputSchema"])
                      for t in listed})
    return tools


def test_agent_tool_schemas_are_enforced_exactly():
    tools = agent_tools()
    assert len(tools) >= 45
    problems = {name: [str(p) for p in plan_schema(schema).problems]
                for name, (_, schema) in tools.items()}
    assert {name: found for name, found in problems.items() if found} == {}


@pytest.mark.smollm2
@pytest.mark.slow
def test_forced_calls_of_every_agent_tool_validate(smollm2_engine):
    import jsonschema

    from models.engine import ChatOptions
    from models.server.tool_calls import FORMATS, Tool, ToolChoice, call_grammar, parse_calls

    fmt = FORMATS["hermes"]
    outcomes = {"valid": [], "cut": [], "invalid": []}
    for name, (description, schema) in agent_tools().items():
        function = name.split("/")[1]
        grammar = call_grammar([Tool(function, description, schema)], fmt,
                               ToolChoice("named", function, parallel=False))
        ask = [{"role": "user", "content": f"Call the function {function} with sensible "
                                           f"arguments. {description[:200]}"}]
        reply = smollm2_engine.chat(ask, ChatOptions(temperature=0.0, max_tokens=200,
                                                     response_format="grammar",
                                                     grammar=grammar)).wait()
        if reply.stats.stop_reason == "length":
            outcomes["cut"].append(name)
            continue
        calls = parse_calls(reply.text, fmt)
        arguments = calls[0].arguments if calls else None
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        ok = calls is not None and len(calls) == 1 and calls[0].name == function \
            and arguments is not None and cls(schema).is_valid(arguments)
        outcomes["valid" if ok else "invalid"].append(name if ok else (name, reply.text))
    print({k: len(v) for k, v in outcomes.items()}, outcomes["cut"])
    assert outcomes["invalid"] == []
    assert len(outcomes["valid"]) >= 0.85 * len(agent_tools())
