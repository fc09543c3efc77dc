#!/usr/bin/env bash
# Sets SoulMem up (installs what is missing, builds) and runs the demo.
#   bash scripts/run.sh [mix soul.demo options]
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

if ! command -v cargo >/dev/null 2>&1 && [[ -x "$HOME/.cargo/bin/cargo" ]]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi

printf '\n==== run: mix soul.demo ====\n'
exec mix soul.demo "$@" </dev/null
