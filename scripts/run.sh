#!/usr/bin/env bash
# Sets SoulMem up (installs what is missing, builds), serves the chat endpoint with the demo
# character 小红 (`demo`, http://127.0.0.1:4000, token $SOUL_MEM_DEMO_TOKEN or dev-token) and
# opens a terminal chat with her: type a line, see what she recalls (and her reply when an LLM
# is configured).
#   bash scripts/run.sh [--llm] [mix soul.chat options, e.g. --say "你还记得麻辣烫吗"]
# With no LLM configured (SOUL_MEM_LLM_BASE_URL) the server looks for one on the usual local
# ports (llama.cpp, Ollama, LM Studio, vLLM) and says what it found; --llm first installs and
# serves the project's own small local model (scripts/llm.sh: llama.cpp + Qwen2.5, CPU).
set -euo pipefail

with_llm=0
if [[ ${1:-} == --llm ]]; then
  with_llm=1
  shift
fi

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

if ! command -v cargo >/dev/null 2>&1 && [[ -x "$HOME/.cargo/bin/cargo" ]]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi

if [[ $with_llm -eq 1 ]]; then
  printf '\n==== run: local LLM (scripts/llm.sh install + serve) ====\n'
  bash scripts/llm.sh install
  bash scripts/llm.sh serve
fi

# shellcheck source=scripts/vm_flags.sh
source scripts/vm_flags.sh

printf '\n==== run: mix soul.server --chat (demo character, endpoint on 127.0.0.1:%s) ====\n' "${PORT:-4000}"
mix soul.demo </dev/null
# One VM serves the chat endpoint (page, WebSocket, HTTP API) and the terminal chat, so both
# talk to the same character. stdin stays attached for the chat; when it ends (or there is no
# terminal) the endpoint keeps serving until Ctrl-C. With --say the turns run and it exits.
exec mix soul.server --chat "$@"
