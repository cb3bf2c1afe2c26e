"""ctxgc exec-policy wrapper around headroom-ai's compress() (PyPI, headroom-ai==0.42.0).

Protocol (see crates/ctxgc-replay/src/policies/exec.rs): one JSON object per line on stdin,
{"session", "window", "messages"}; one JSON array of messages per line on stdout. headroom is
stateless per call: it gets the agent's whole verbatim history and returns what to send.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HEADROOM_OFFLINE", "1")

import headroom  # noqa: E402  (after the offline settings)

MODEL = os.environ.get("CTXGC_HEADROOM_MODEL", "gpt-4o")

for line in sys.stdin:
    request = json.loads(line)
    try:
        result = headroom.compress(request["messages"], model=MODEL, model_limit=int(request["window"]))
        messages = result.messages
    except Exception as error:  # report, and send the history unchanged
        print(f"headroom failed: {error!r}", file=sys.stderr)
        messages = request["messages"]
    sys.stdout.write(json.dumps(messages) + "\n")
    sys.stdout.flush()
