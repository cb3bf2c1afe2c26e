"""Integrations of ctxgc with agent frameworks, each importable only with its framework:

- :mod:`ctxgc.integrations.hermes`: a Hermes plugin (tool-result transform + context engine);
- :mod:`ctxgc.integrations.langchain`: a LangChain 1.x ``AgentMiddleware``;
- :mod:`ctxgc.integrations.openai_agents`: OpenAI Agents SDK tool wrapper, input filter, recall;
- :mod:`ctxgc.integrations.minisweagent`: a mini-swe-agent model class;
- :mod:`ctxgc.integrations.litellm`: a LiteLLM proxy pre-call hook.
"""
