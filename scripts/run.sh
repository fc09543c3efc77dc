#!/usr/bin/env bash
# Sets SoulMem up (installs what is missing, builds) and starts the demo character 小红 in a
# terminal chat: type a line, see what she recalls (and her reply when an LLM is configured).
#   bash scripts/run.sh [mix soul.chat options, e.g. --say "你还记得麻辣烫吗"]
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

if ! command -v cargo >/dev/null 2>&1 && [[ -x "$HOME/.cargo/bin/cargo" ]]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi

printf '\n==== run: mix soul.chat (demo character) ====\n'
mix soul.demo </dev/null
# stdin stays attached: this is the interactive chat (setup already built everything, so mix
# has nothing to ask).
exec mix soul.chat "$@"
