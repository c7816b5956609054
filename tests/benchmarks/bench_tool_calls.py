"""Forced tool calls with SmolLM2: how often the arguments parse and match the schema.

Sends the same requests — 12 function schemas (nested objects, enums, arrays, required
fields, integer ranges, a $ref), each with its prompts, ``tool_choice`` forced to the
function by name or to ``required`` — through the real ``openai`` client to QuantDesk's
server and, when it is built, to llama.cpp's own ``llama-server --jinja`` on the same
GGUF, greedy. A call counts as valid when there is exactly the forced function's call
(or, for ``required``, calls of offered functions) and its arguments parse as JSON and
validate against the function's parameters (``models.structured.validate``, whose
verdicts equal ``jsonschema``'s). Prints both rates and the kinds of failure seen.

Run: .venv/bin/python tests/benchmarks/bench_tool_calls.py [--per-schema 18]
     [--llama-tools /work/llama-tools] [--max-tokens 96]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

S = {"type": "string", "maxLength": 24}
SCHEMAS = {
    "get_weather": {"type": "object", "properties": {
        "city": S, "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]},
    "book_flight": {"type": "object", "properties": {
        "from": S, "to": S, "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
        "class": {"enum": ["economy", "business", "first"]}},
        "required": ["from", "to", "passengers"]},
    "add_todo": {"type": "object", "properties": {
        "title": S, "tags": {"type": "array", "items": S, "maxItems": 3},
        "due": {"type": "object", "properties": {
            "day": {"type": "integer", "minimum": 1, "maximum": 31},
            "month": {"type": "integer", "minimum": 1, "maximum": 12}},
            "required": ["day", "month"]}}, "required": ["title", "due"]},
    "send_email": {"type": "object", "properties": {
        "to": {"type": "array", "items": S, "minItems": 1, "maxItems": 3},
        "subject": S, "urgent": {"type": "boolean"}}, "required": ["to", "subject"]},
    "set_alarm": {"type": "object", "properties": {
        "hour": {"type": "integer", "minimum": 0, "maximum": 23},
        "minute": {"type": "integer", "minimum": 0, "maximum": 59},
        "repeat": {"enum": ["never", "daily", "weekdays"]}}, "required": ["hour", "minute"]},
    "create_user": {"type": "object", "properties": {
        "name": S, "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "address": {"type": "object", "properties": {
            "street": S, "city": S, "country": {"enum": ["FR", "DE", "US", "JP"]}},
            "required": ["city", "country"]}}, "required": ["name", "address"]},
    "search_products": {"type": "object", "properties": {
        "query": S, "max_price": {"type": "number"},
        "sort": {"enum": ["price", "rating", "newest"]}}, "required": ["query"]},
    "convert_units": {"type": "object", "properties": {
        "value": {"type": "number"}, "from_unit": {"enum": ["m", "km", "mi", "ft"]},
        "to_unit": {"enum": ["m", "km", "mi", "ft"]}},
        "required": ["value", "from_unit", "to_unit"]},
    "plan_meeting": {"type": "object", "properties": {
        "title": S, "attendees": {"type": "array", "items": {
            "type": "object", "properties": {"name": S, "optional": {"type": "boolean"}},
            "required": ["name"]}, "minItems": 1, "maxItems": 3},
        "minutes": {"type": "integer", "minimum": 15, "maximum": 240}},
        "required": ["title", "attendees"]},
    "rate_movie": {"type": "object", "properties": {
        "title": S, "stars": {"type": "integer", "minimum": 1, "maximum": 5},
        "review": {"type": "string", "maxLength": 60}}, "required": ["title", "stars"]},
    "move_robot": {"type": "object", "properties": {
        "steps": {"type": "array", "items": {"$ref": "#/$defs/step"}, "minItems": 1,
                  "maxItems": 3}},
        "$defs": {"step": {"type": "object", "properties": {
            "direction": {"enum": ["north", "south", "east", "west"]},
            "distance": {"type": "integer", "minimum": 1, "maximum": 100}},
            "required": ["direction", "distance"]}}, "required": ["steps"]},
    "translate": {"type": "object", "properties": {
        "text": {"type": "string", "maxLength": 40},
        "target": {"enum": ["en", "fr", "de", "es"]}}, "required": ["text", "target"]},
}
PROMPTS = {
    "get_weather": ["Weather in {c}?", "Is it cold in {c} today?", "Forecast for {c}."],
    "book_flight": ["Book a flight from {c} to {d} for {n} people.",
                    "I need {n} seats from {d} to {c}.", "Fly me to {c} from {d}."],
    "add_todo": ["Remind me to call {p} on May {n}.", "Add 'buy milk' for the {n}th of June.",
                 "Todo: visit {c} on day {n} of month 3."],
    "send_email": ["Email {p} about the {c} trip.", "Send an urgent mail to {p}.",
                   "Write to {p} and {q}: meeting moved."],
    "set_alarm": ["Wake me at {n}:30.", "Set an alarm for {n} o'clock every day.",
                  "Alarm at 7:{n} on weekdays."],
    "create_user": ["Create a user {p}, {n} years old, living in {c}.",
                    "New account for {q} from {c}.", "Register {p} in Germany."],
    "search_products": ["Find headphones under {n} dollars.", "Search for {c} guidebooks.",
                        "Show me the newest laptops."],
    "convert_units": ["How many km is {n} miles?", "Convert {n} feet to meters.",
                      "{n} km in miles?"],
    "plan_meeting": ["Plan a meeting with {p} and {q} for {n} minutes.",
                     "Set up a call with {p} about {c}.", "Meeting: budget review with {q}."],
    "rate_movie": ["Give Titanic {s} stars.", "Rate The Matrix {s} out of 5: great fun.",
                   "I'd give Cats {s} stars."],
    "move_robot": ["Move the robot {n} steps north.", "Go east {n} then south 3.",
                   "Robot: west {n}."],
    "translate": ["Translate 'good morning' to French.", "Say 'thank you' in German.",
                  "How do you say '{c}' in Spanish?"],
}
FILL = [dict(c="Paris", d="Berlin", n=2, p="Anna", q="Bob", s=4),
        dict(c="Tokyo", d="Oslo", n=5, p="Luis", q="Mei", s=2),
        dict(c="Lima", d="Rome", n=9, p="Sara", q="Tom", s=5)]


def tools_for(names: list[str]) -> list[dict]:
    return [{"type": "function", "function": {
        "name": n, "description": f"{n.replace('_', ' ')}.", "parameters": SCHEMAS[n]}}
        for n in names]


def requests(per_schema: int) -> list[dict]:
    """The requests: per schema, its prompts with varied fillings; even ones force the
    function by name (offering it and two others), odd ones ``required`` with it alone."""
    names = list(SCHEMAS)
    out = []
    for index, name in enumerate(names):
        others = [names[(index + 1) % len(names)], names[(index + 5) % len(names)]]
        for k in range(per_schema):
            prompt = PROMPTS[name][k % 3].format(**FILL[(k // 3) % 3])
            if k % 2 == 0:
                out.append({"name": name, "prompt": prompt, "tools": tools_for([name] + others),
                            "tool_choice": {"type": "function", "function": {"name": name}}})
            else:
                out.append({"name": name, "prompt": prompt, "tools": tools_for([name]),
                            "tool_choice": "required"})
    return out


def check(reply, case: dict) -> str:
    """'' when the call is valid, else what was wrong."""
    from models.structured import validation_errors

    calls = reply.choices[0].message.tool_calls or []
    if not calls:
        return "no tool call"
    for call in calls:
        if call.function.name != case["name"]:
            return "wrong function"
        try:
            arguments = json.loads(call.function.arguments)
        except (ValueError, TypeError):
            return "arguments not JSON"
        if validation_errors(arguments, SCHEMAS[case["name"]]):
            return "arguments do not match the schema"
    return ""


def run_all(client, model: str, cases: list[dict], max_tokens: int, label: str) -> dict:
    failures = collections.Counter()
    started = time.perf_counter()
    for number, case in enumerate(cases):
        try:
            reply = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": case["prompt"]}],
                tools=case["tools"], tool_choice=case["tool_choice"], temperature=0,
                max_tokens=max_tokens)
            problem = check(reply, case)
        except Exception as exc:  # an HTTP error counts as a failed call
            problem = f"error {type(exc).__name__}"
        if problem:
            failures[problem] += 1
        if (number + 1) % 24 == 0 or os.environ.get("BENCH_VERBOSE"):
            print(f"  {label}: {number + 1}/{len(cases)} done, {sum(failures.values())} "
                  f"invalid, {time.perf_counter() - started:.0f} s", flush=True)
    valid = len(cases) - sum(failures.values())
    return {"valid": valid, "total": len(cases), "failures": dict(failures),
            "seconds": time.perf_counter() - started}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_quantdesk(gguf: Path, cases: list[dict], max_tokens: int, threads: int) -> dict:
    import openai

    from models.engine import LoadSettings
    from models.library import Library
    from models.server.config import ServerConfig
    from models.server.controller import ServerController
    from models.server.engine_pool import EnginePool

    home = Path(tempfile.mkdtemp(prefix="quantdesk-bench-tools-"))
    os.environ["QUANTDESK_HOME"] = str(home)
    library = Library(home / "models")
    library.import_path(gguf)
    pool = EnginePool(settings_for=lambda path: LoadSettings(
        threads=threads, batch_threads=threads, context_length=2048))
    controller = ServerController(ServerConfig(port=0), engines=pool, library=library)
    controller.start()
    try:
        client = openai.OpenAI(base_url=f"{controller.address}/v1", api_key="none",
                               max_retries=0, timeout=600)
        model = client.models.list().data[0].id
        return run_all(client, model, cases, max_tokens, "QuantDesk")
    finally:
        controller.stop()
        pool.close()


def run_llama_server(tools_dir: Path, gguf: Path, cases: list[dict], max_tokens: int,
                     threads: int) -> dict | None:
    import openai

    binary = tools_dir / "build" / "bin" / "llama-server"
    if not binary.exists():
        print(f"llama-server is not built at {binary}; its rate is not measured.")
        return None
    port = free_port()
    env = dict(os.environ, LD_LIBRARY_PATH=str(binary.parent))
    process = subprocess.Popen(
        [str(binary), "-m", str(gguf), "--jinja", "--port", str(port), "-t", str(threads),
         "-c", "2048", "-np", "1", "--flash-attn", "off"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none",
                               max_retries=0, timeout=600)
        deadline = time.monotonic() + 120
        while True:
            try:
                client.models.list()
                break
            except Exception:
                if time.monotonic() > deadline or process.poll() is not None:
                    print("llama-server did not start; its rate is not measured.")
                    return None
                time.sleep(0.5)
        return run_all(client, "model", cases, max_tokens, "llama-server")
    finally:
        process.terminate()
        process.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-schema", type=int, default=18,
                        help="requests per function schema (default 18: 12 schemas x 18 = "
                             "216 forced calls)")
    parser.add_argument("--max-tokens", type=int, default=96,
                        help="most tokens per reply, on both servers (default 96)")
    parser.add_argument("--threads", type=int, default=2,
                        help="CPU threads for each server's model (default 2)")
    parser.add_argument("--llama-tools", type=Path,
                        default=Path(os.environ.get("QUANTDESK_LLAMA_TOOLS",
                                                    "~/.cache/quantdesk-llama-tools")).expanduser(),
                        help="the folder llama.cpp's tools were built in, holding "
                             "build/bin/llama-server (default $QUANTDESK_LLAMA_TOOLS or "
                             "~/.cache/quantdesk-llama-tools)")
    parser.add_argument("--skip-llama-server", action="store_true",
                        help="measure QuantDesk's server only")
    args = parser.parse_args()

    from tests.conftest import cached_models_dir, fetch_smollm2

    gguf = fetch_smollm2(cached_models_dir())
    cases = requests(args.per_schema)
    print(f"{len(cases)} forced tool calls over {len(SCHEMAS)} function schemas, SmolLM2 "
          f"({gguf.name}), greedy, max_tokens {args.max_tokens}")
    results = {"QuantDesk": run_quantdesk(gguf, cases, args.max_tokens, args.threads)}
    if not args.skip_llama_server:
        other = run_llama_server(args.llama_tools, gguf, cases, args.max_tokens, args.threads)
        if other is not None:
            results["llama-server"] = other
    for label, result in results.items():
        rate = result["valid"] / result["total"]
        print(f"{label}: {result['valid']}/{result['total']} valid ({rate:.1%}), "
              f"{result['seconds']:.0f} s; failures: {result['failures'] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
