"""The OpenAI-compatible endpoint driven by the official `openai` PyPI client.

Run by SoulMemWeb.OpenAITest with SOUL_HTTP, SOUL_TOKEN, SOUL_CHARACTER,
SOUL_OTHER_TOKEN and SOUL_REPLIES (the scripted upstream's answers, in order).
Prints one JSON line {"ok": true, ...}; exits non-zero on the first failed check.
"""
import json
import os
import sys

import openai

base = os.environ["SOUL_HTTP"] + "/v1"
token = os.environ["SOUL_TOKEN"]
character = os.environ["SOUL_CHARACTER"]
replies = json.loads(os.environ["SOUL_REPLIES"])


def fail(message):
    print("FAIL openai_client.py: " + message, file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def refused(call, status, what):
    try:
        call()
    except openai.APIStatusError as e:
        check(e.status_code == status, f"{what}: status {e.status_code}, want {status}")
        body = e.body if isinstance(e.body, dict) else {}
        check("message" in body, f"{what}: no OpenAI-shaped error: {e.body!r}")
        return
    fail(f"{what}: was accepted")


client = openai.OpenAI(api_key=token, base_url=base, max_retries=0, timeout=20)
card = {"role": "system", "content": "你是小红，十六岁的高中生。"}
first = [card, {"role": "user", "content": "你还记得老街的麻辣烫店吗？"}]

ids = [m.id for m in client.models.list().data]
check(ids == [character], f"models: {ids}")

one = client.chat.completions.create(model=character, messages=first, temperature=0.7)
check(one.choices[0].message.content == replies[0], f"reply 1: {one.choices[0].message.content}")

second = first + [
    {"role": "assistant", "content": replies[0]},
    {"role": "user", "content": "周末一起去吧？"},
]
pieces = []
for chunk in client.chat.completions.create(model=character, messages=second, stream=True):
    if chunk.choices and chunk.choices[0].delta.content:
        pieces.append(chunk.choices[0].delta.content)
check("".join(pieces) == replies[1], f"streamed: {''.join(pieces)}")
check(len(pieces) > 1, "the reply came in one piece")

again = client.chat.completions.create(model=character, messages=second)
check(again.choices[0].message.content == replies[2], "regenerated")

refused(lambda: client.chat.completions.create(model="nobody", messages=first), 404, "wrong model")
other = openai.OpenAI(api_key=os.environ["SOUL_OTHER_TOKEN"], base_url=base, max_retries=0)
refused(lambda: other.chat.completions.create(model=character, messages=first), 404, "another token")
bad = openai.OpenAI(api_key="sm-wrong", base_url=base, max_retries=0)
refused(lambda: bad.chat.completions.create(model=character, messages=first), 401, "wrong token")
refused(lambda: client.chat.completions.create(model=character, messages=[card]), 400, "no user message")

print(json.dumps({"ok": True, "pieces": len(pieces)}))
