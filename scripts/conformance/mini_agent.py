#!/usr/bin/env python3
"""mini-swe-agent (its DefaultAgent, LitellmModel and LocalEnvironment, with its default
config) through `ctxgc serve`, as its users run it. Exits 0 when the agent submitted.

Usage: mini_agent.py BASE_URL
"""
import sys

import yaml
from minisweagent import package_dir
from minisweagent.agents.default import DefaultAgent
from minisweagent.environments.local import LocalEnvironment
from minisweagent.models.litellm_model import LitellmModel

config = yaml.safe_load((package_dir / "config" / "default.yaml").read_text())
agent_config = dict(config["agent"], step_limit=40)
model = LitellmModel(
    model_name="openai/gpt-5",
    model_kwargs={"api_base": sys.argv[1] + "/v1", "api_key": "sk-conformance-mini"},
    cost_tracking="ignore_errors",
    **{k: v for k, v in config.get("model", {}).items() if k in ("observation_template", "format_error_template")},
)
environment = LocalEnvironment(**config.get("environment", {}))
result = DefaultAgent(model, environment, **agent_config).run("Conformance run (mini-swe-agent): run the scripted checks")
print(result)
sys.exit(0 if result.get("exit_status") == "Submitted" else 1)
