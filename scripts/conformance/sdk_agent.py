#!/usr/bin/env python3
"""A small tool-using agent on an official SDK (openai, anthropic or google-genai), as SDK users
write them:
it sends the whole history each turn, runs the model's shell calls locally and stops at the
model's final answer. Used by the conformance suite through `ctxgc serve`.

Usage: sdk_agent.py MODE BASE_URL
MODE: chat, chat-stream, responses, responses-stream, messages, messages-stream, gemini,
gemini-stream.
Exits 0 when the model answered "Done...", 1 on any error (an API error, a stream whose
response id changed, a malformed reply).
"""
import json
import os
import subprocess
import sys

MODE, BASE = sys.argv[1], sys.argv[2]
TASK = "Conformance run (%s): run the scripted checks and report." % MODE
PINNED = "Environment: working directory /tmp/ctxgc-conformance; this note is pinned by the client."
MAX_TURNS = 40
# The OpenAI model asked for (GPT-5.6 and later take breakpoints and refuse the retention).
OPENAI_MODEL = os.environ.get("CONFORMANCE_OPENAI_MODEL", "gpt-5")


def run(command):
    if isinstance(command, list):
        command = " ".join(command)
    p = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
    return (p.stdout + p.stderr) + "\nexit status: %d\n" % p.returncode


def shell_spec():
    return {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}


def chat(stream):
    import openai
    client = openai.OpenAI(base_url=BASE + "/v1", api_key="sk-conformance-chat", max_retries=0)
    tools = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command", "parameters": shell_spec()}}]
    messages = [{"role": "system", "content": "You are a careful coding agent."},
                {"role": "user", "content": TASK},
                {"role": "system", "content": PINNED}]
    for _ in range(MAX_TURNS):
        if stream:
            ids, content, calls = set(), "", {}
            for chunk in client.chat.completions.create(model=OPENAI_MODEL, messages=messages, tools=tools, stream=True,
                                                        stream_options={"include_usage": True}):
                ids.add(chunk.id)
                for choice in chunk.choices:
                    content += choice.delta.content or ""
                    for tc in choice.delta.tool_calls or []:
                        c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                        c["id"] = tc.id or c["id"]
                        c["name"] += (tc.function.name or "") if tc.function else ""
                        c["arguments"] += (tc.function.arguments or "") if tc.function else ""
            if len(ids) != 1:
                raise SystemExit("one streamed response carried several ids: %s" % sorted(ids))
            tool_calls = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                          for _, c in sorted(calls.items())]
        else:
            reply = client.chat.completions.create(model=OPENAI_MODEL, messages=messages, tools=tools)
            message = reply.choices[0].message
            content = message.content or ""
            tool_calls = [{"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
                          for c in message.tool_calls or []]
        if not tool_calls:
            return content
        messages.append({"role": "assistant", "content": content or None, "tool_calls": tool_calls})
        for c in tool_calls:
            if c["function"]["name"] != "bash":
                raise SystemExit("the model called a tool the client does not have: %s" % c["function"]["name"])
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": run(json.loads(c["function"]["arguments"])["command"])})
    raise SystemExit("no final answer after %d turns" % MAX_TURNS)


def responses(stream):
    import openai
    client = openai.OpenAI(base_url=BASE + "/v1", api_key="sk-conformance-responses", max_retries=0)
    tools = [{"type": "function", "name": "bash", "description": "Run a shell command", "parameters": shell_spec(), "strict": False}]
    items = [{"role": "user", "content": TASK}, {"role": "developer", "content": PINNED}]
    for _ in range(MAX_TURNS):
        if stream:
            # The SDK checks that one streamed response keeps one id.
            with client.responses.stream(model=OPENAI_MODEL, instructions="You are a careful coding agent.", input=items, tools=tools) as s:
                for _event in s:
                    pass
                response = s.get_final_response()
        else:
            response = client.responses.create(model=OPENAI_MODEL, instructions="You are a careful coding agent.", input=items, tools=tools)
        calls = [o for o in response.output if o.type == "function_call"]
        if not calls:
            return response.output_text
        for o in response.output:
            items.append(o.model_dump(exclude_none=True))
        for c in calls:
            if c.name != "bash":
                raise SystemExit("the model called a tool the client does not have: %s" % c.name)
            items.append({"type": "function_call_output", "call_id": c.call_id, "output": run(json.loads(c.arguments)["command"])})
    raise SystemExit("no final answer after %d turns" % MAX_TURNS)


def messages(stream):
    import anthropic
    client = anthropic.Anthropic(base_url=BASE, api_key="sk-ant-conformance", max_retries=0)
    tools = [{"name": "bash", "description": "Run a shell command", "input_schema": shell_spec()}]
    history = [{"role": "user", "content": TASK}]
    kwargs = dict(model="claude-sonnet-4-5", max_tokens=4096, system="You are a careful coding agent.", tools=tools,
                  thinking={"type": "enabled", "budget_tokens": 1024})
    for _ in range(MAX_TURNS):
        if stream:
            with client.messages.stream(messages=history, **kwargs) as s:
                ids = set()
                for event in s:
                    if event.type == "message_start":
                        ids.add(event.message.id)
                message = s.get_final_message()
            if len(ids) != 1:
                raise SystemExit("one streamed message started %d times" % len(ids))
        else:
            message = client.messages.create(messages=history, **kwargs)
        uses = [b for b in message.content if b.type == "tool_use"]
        if not uses:
            return "".join(b.text for b in message.content if b.type == "text")
        history.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
        results = []
        for u in uses:
            if u.name != "bash":
                raise SystemExit("the model called a tool the client does not have: %s" % u.name)
            results.append({"type": "tool_result", "tool_use_id": u.id, "content": run(u.input["command"])})
        history.append({"role": "user", "content": results})
    raise SystemExit("no final answer after %d turns" % MAX_TURNS)


def gemini(stream):
    from google import genai
    from google.genai import types
    client = genai.Client(api_key="conformance-gemini-key",
                          http_options=types.HttpOptions(base_url=BASE, api_version="v1beta"))
    bash = types.FunctionDeclaration(name="bash", description="Run a shell command", parameters={
        "type": "OBJECT", "properties": {"command": {"type": "STRING"}}, "required": ["command"]})
    config = types.GenerateContentConfig(
        system_instruction="You are a careful coding agent.",
        tools=[types.Tool(function_declarations=[bash])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    contents = [types.Content(role="user", parts=[types.Part(text=TASK), types.Part(text=PINNED)])]
    for _ in range(MAX_TURNS):
        if stream:
            parts = []
            for chunk in client.models.generate_content_stream(model="gemini-2.5-pro", contents=contents, config=config):
                for part in (chunk.candidates[0].content.parts or []) if chunk.candidates else []:
                    parts.append(part)
        else:
            response = client.models.generate_content(model="gemini-2.5-pro", contents=contents, config=config)
            parts = list(response.candidates[0].content.parts or [])
        calls = [p.function_call for p in parts if p.function_call]
        if not calls:
            return "".join(p.text or "" for p in parts if not p.thought)
        contents.append(types.Content(role="model", parts=parts))
        answers = []
        for c in calls:
            if c.name != "bash":
                raise SystemExit("the model called a tool the client does not have: %s" % c.name)
            answers.append(types.Part(function_response=types.FunctionResponse(
                id=c.id, name=c.name, response={"output": run(c.args["command"])})))
        contents.append(types.Content(role="user", parts=answers))
    raise SystemExit("no final answer after %d turns" % MAX_TURNS)


if __name__ == "__main__":
    kind, _, streamed = MODE.partition("-")
    answer = {"chat": chat, "responses": responses, "messages": messages, "gemini": gemini}[kind](streamed == "stream")
    print(answer)
    if not answer.startswith("Done"):
        raise SystemExit("the model's last word was not the script's end: %r" % answer)
