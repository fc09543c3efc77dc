#!/usr/bin/env bash
# The one test command of SoulMem: Rust checks and tests, then Elixir checks
# and tests. Stops at the first failing step and names it.
#
#   bash scripts/test.sh          # everything (what CI runs)
#   bash scripts/test.sh rust     # only the cargo steps
#   bash scripts/test.sh elixir   # only the mix steps
set -euo pipefail

part=${1:-all}
case "$part" in
  all | rust | elixir) ;;
  *) echo "usage: bash scripts/test.sh [all|rust|elixir]" >&2; exit 2 ;;
esac

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

if ! command -v cargo >/dev/null 2>&1 && [[ -x "$HOME/.cargo/bin/cargo" ]]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi

step=""
started=$SECONDS
section() {
  step="$*"
  printf '\n==== test: %s ====\n' "$step"
}
trap 'status=$?; if [[ $status -ne 0 ]]; then printf "\n==== test: FAILED at step: %s (exit %s) ====\n" "$step" "$status" >&2; fi' EXIT

if [[ $part != elixir ]]; then
  cd "$root/native"

  section "cargo fmt --check"
  cargo fmt --all -- --check </dev/null

  section "cargo clippy"
  cargo clippy --workspace --all-targets --locked -- -D warnings </dev/null

  section "cargo test (release)"
  cargo test --workspace --locked --release </dev/null
fi

if [[ $part != rust ]]; then
  cd "$root"

  section "mix format --check-formatted"
  mix format --check-formatted </dev/null

  section "mix compile (test, forced, warnings as errors)"
  MIX_ENV=test mix compile --force --warnings-as-errors </dev/null

  section "mix test"
  MIX_ENV=test mix test --warnings-as-errors </dev/null

  section "release smoke test (test/release_test.sh)"
  bash test/release_test.sh </dev/null
fi

step=""
printf '\n==== test: all steps of '$part' passed (%ss) ====\n' "$((SECONDS - started))"
