"""``quantdesk schema check``: the verdict on schema files, as people and programs read it."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO_ROOT


def run_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "schema", "check", *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


def test_schema_check_names_each_problem_with_its_pointer(tmp_path):
    enforced = tmp_path / "shape.json"  # draft-04, annotations, vendor keywords: all fine
    enforced.write_text(json.dumps({
        "$schema": "http://json-schema.org/draft-04/schema#", "id": "shape", "title": "Shape",
        "javaType": "org.example.Shape", "type": "object", "required": ["radius"],
        "properties": {"radius": {"type": "number", "minimum": 0, "exclusiveMinimum": True,
                                  "example": 2.5, "format": "length"}}}))
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "code": {"type": "string", "not": {"const": ""}}}}))
    broken = tmp_path / "broken.json"
    broken.write_text('{"type": "string", "minLength": "3"}')
    not_json = tmp_path / "not-json.json"
    not_json.write_text("{nope")

    result = run_check(str(enforced), str(partial))
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"{enforced}: enforced exactly"
    assert lines[1] == f"{partial}: not enforced exactly (2 problems)"
    assert any(line.startswith("  /properties/tags/uniqueItems: ") for line in lines)
    assert any(line.startswith("  /properties/code/not: ") for line in lines)

    result = run_check("--json", str(enforced), str(partial), str(broken), str(not_json))
    verdicts = [json.loads(line) for line in result.stdout.splitlines()]
    assert [v["path"] for v in verdicts] == [str(enforced), str(partial), str(broken), str(not_json)]
    assert [v["enforced"] for v in verdicts] == [True, False, False, False]
    assert verdicts[0]["problems"] == []
    assert {p["pointer"] for p in verdicts[1]["problems"]} == {
        "/properties/tags/uniqueItems", "/properties/code/not"}
    assert verdicts[2]["problems"][0]["pointer"] == "/minLength"
    assert "not valid JSON (line 1, column 2" in verdicts[3]["problems"][0]["message"]
    assert result.returncode == 1 and "Traceback" not in result.stderr

    assert run_check(str(enforced)).returncode == 0


def test_patterns_python_warns_about_print_no_warning(tmp_path):
    """Real-world patterns with a ``[`` first in a class or a doubled ``-`` in one: Python
    reads them as ECMA 262 does but warns (FutureWarning) that it may not one day."""
    schema = tmp_path / "patterns.json"
    schema.write_text(json.dumps({"type": "object", "properties": {
        "word": {"type": "string", "pattern": "^[[a-z]]+$"},
        "range": {"type": "string", "pattern": "^[a-z--b]+$"},
        "both": {"type": "string", "pattern": "^[a&&b||c~~d]$"}},
        "patternProperties": {"^[[x]": {"type": "string"}}}))
    result = run_check(str(schema))
    assert "Warning" not in result.stderr, result.stderr
    assert result.stdout.startswith(f"{schema}: "), result.stdout
