"""ctxgc for the OpenAI Agents SDK (``pip install 'ctxgc[openai-agents]'``)::

    from agents import Agent, RunConfig, Runner
    from ctxgc.integrations.openai_agents import Ctxgc

    cx = Ctxgc(window=400_000)
    tools = [*cx.wrap_tools([run_shell, read_file]), cx.recall_tool()]
    agent = Agent(name="coder", tools=tools)
    config = RunConfig(call_model_input_filter=cx.input_filter)
    result = await Runner.run(agent, task, run_config=config)

- :meth:`Ctxgc.wrap_tool`: the tool's output (a string, ``ToolOutputText``, or an object
  rendered as pretty JSON) is stored, then trimmed before the SDK puts it into the history
  (the SDK's ``ToolOutputTrimmer`` keeps a head-only preview and no original);
- :meth:`Ctxgc.input_filter`: a ``call_model_input_filter`` that runs ctxgc's events on the
  Responses items the model is about to get (``instructions`` are never changed);
- :meth:`Ctxgc.recall_tool`: ``recall_tool_result`` as a ``FunctionTool``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agents import FunctionTool, ToolOutputFileContent, ToolOutputImage, ToolOutputText
from agents.run_config import CallModelData, ModelInputData
from agents.tool_context import ToolContext

from .. import RECALL_TOOL, Config, Session, Store, SummaryRequest
from ._common import render_object, resolve, trim_and_store, trim_text_blocks

__all__ = ["Ctxgc"]

Summarizer = Callable[[SummaryRequest], "str | Awaitable[str]"]


def _plain(item: Any) -> Any:
    """An input item as plain JSON data (the SDK mixes TypedDicts and pydantic models)."""
    if hasattr(item, "model_dump"):
        return item.model_dump(exclude_unset=True, mode="json")
    return item


def _is_text(output: Any) -> bool:
    return isinstance(output, ToolOutputText) or (
        isinstance(output, dict) and output.get("type") == "text"
    )


def _is_structured(output: Any) -> bool:
    """One of the SDK's structured tool outputs (text, image, file), which it sends as such."""
    if isinstance(output, ToolOutputText | ToolOutputImage | ToolOutputFileContent):
        return True
    return isinstance(output, dict) and output.get("type") in ("text", "image", "file")


class Ctxgc:
    """ctxgc for one agent run (one session); make one per conversation."""

    def __init__(
        self,
        *,
        window: int | None = None,
        model: str | None = None,
        config: Config | None = None,
        store: Store | None = None,
        summarizer: Summarizer | None = None,
        session_id: str = "openai-agents",
    ) -> None:
        self.config, self.store = resolve(config, store)
        self.session = Session(
            "responses",
            store=self.store,
            config=self.config,
            window=window,
            model=model,
            summarizer=summarizer,
            session_id=session_id,
        )

    # -- insertion --------------------------------------------------------------------------

    def wrap_tool(self, tool: FunctionTool) -> FunctionTool:
        """The same tool, its output stored and trimmed at insertion.

        What the SDK would send is what is trimmed: a ``str``; the text of a ``ToolOutputText``
        (or a ``{"type": "text"}`` dict, or a list of them), which stays that shape; a pydantic
        model, dataclass, dict or list, which the SDK would send as its Python repr on one
        line, is rendered as pretty JSON first. A tool with a declared output schema keeps its
        objects (the SDK validates them)."""
        invoke = tool.on_invoke_tool

        async def on_invoke_tool(context: ToolContext[Any], arguments: str) -> Any:
            return self._for_the_model(tool, await invoke(context, arguments))

        return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)

    def _for_the_model(self, tool: FunctionTool, output: Any) -> Any:
        where = {
            "tool": tool.name,
            "window": self.session.window,
            "config": self.config,
            "store": self.store,
            "session": self.session.session_id,
        }
        if isinstance(output, str):
            return trim_and_store(output, **where)
        if isinstance(output, ToolOutputText):
            text = trim_and_store(output.text, **where)
            return output if text is output.text else output.model_copy(update={"text": text})
        if isinstance(output, dict) and output.get("type") == "text":
            blocks = trim_text_blocks([output], **where)
            return output if blocks is None else blocks[0]
        if isinstance(output, list) and output and all(_is_structured(o) for o in output):
            items = [self._for_the_model(tool, o) if _is_text(o) else o for o in output]
            return items
        if tool.output_json_schema is not None:
            return output
        rendered = render_object(output)
        if rendered is None:
            return output
        return trim_and_store(rendered, **where)

    def wrap_tools(self, tools: Sequence[FunctionTool]) -> list[FunctionTool]:
        """:meth:`wrap_tool` on each tool."""
        return [self.wrap_tool(t) for t in tools]

    # -- events -----------------------------------------------------------------------------

    async def input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """``RunConfig.call_model_input_filter``: the items after ctxgc's events."""
        items = [_plain(item) for item in data.model_data.input]
        prompt = await self.session.aprepare(items)
        return ModelInputData(input=prompt, instructions=data.model_data.instructions)

    # -- recall -----------------------------------------------------------------------------

    def recall_tool(self) -> FunctionTool:
        """``recall_tool_result`` as a ``FunctionTool``."""
        spec = next(t for t in self.session.tools() if t["name"] == RECALL_TOOL)

        async def on_invoke_tool(context: ToolContext[Any], arguments: str) -> str:
            try:
                parsed = json.loads(arguments or "{}")
            except json.JSONDecodeError:
                return "error: the arguments are not JSON"
            call = {k: v for k, v in parsed.items() if v is not None}
            return self.session.handle_tool_call(RECALL_TOOL, call) or ""

        return FunctionTool(
            name=RECALL_TOOL,
            description=spec["description"],
            params_json_schema=spec["parameters"],
            on_invoke_tool=on_invoke_tool,
            strict_json_schema=False,
        )
