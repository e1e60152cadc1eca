#!/usr/bin/env bash
# Creates or reuses .venv and installs the pinned stack into it, idempotently.
#
# Python 3.10 is found as $PYTHON, else python3.10 on PATH, else through pyenv
# (PYENV_VERSION=3.10.13). A second run with unchanged pins installs nothing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
REQUIRED_MINOR="3.10"
PYENV_DEFAULT_VERSION="3.10.13"
PIN_FILES=("$ROOT/requirements/base.txt" "$ROOT/requirements/constraints.txt" "$ROOT/setup.cfg"
           "$ROOT/tools/setup_venv.sh")

find_python() {
  local candidate
  if [[ -n "${PYTHON:-}" ]]; then
    echo "$PYTHON"; return 0
  fi
  if command -v python3.10 >/dev/null 2>&1 && python3.10 -c '' >/dev/null 2>&1; then
    echo "python3.10"; return 0
  fi
  if command -v pyenv >/dev/null 2>&1; then
    candidate="$(PYENV_VERSION="$PYENV_DEFAULT_VERSION" pyenv which python3.10 2>/dev/null || true)"
    if [[ -n "$candidate" ]]; then echo "$candidate"; return 0; fi
  fi
  for candidate in "$HOME/.pyenv/versions/$PYENV_DEFAULT_VERSION/bin/python3.10"; do
    if [[ -x "$candidate" ]]; then echo "$candidate"; return 0; fi
  done
  return 1
}

if [[ ! -x "$VENV/bin/python" ]]; then
  if ! PY="$(find_python)"; then
    echo "setup: Python $REQUIRED_MINOR is required (tensorflow 2.14.1 and sagemaker-tensorflow" >&2
    echo "setup: 2.14.0.1.20.0 ship wheels for it), and none was found: no \$PYTHON, no python3.10" >&2
    echo "setup: on PATH, no pyenv $PYENV_DEFAULT_VERSION. Install one, or run: make PYTHON=/path/to/python3.10 ..." >&2
    exit 1
  fi
  version="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  if [[ "$version" != "$REQUIRED_MINOR" ]]; then
    echo "setup: $PY is Python $version; Python $REQUIRED_MINOR is required." >&2
    exit 1
  fi
  echo "setup: creating $VENV with $PY (Python $version)"
  "$PY" -m venv "$VENV"
fi

stamp="$VENV/.pins-$(cat "${PIN_FILES[@]}" | sha256sum | cut -c1-16)"
if [[ -f "$stamp" ]]; then
  exit 0
fi

PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
echo "setup: installing the pinned stack into $VENV"
"${PIP[@]}" install -q -c "$ROOT/requirements/constraints.txt" -r "$ROOT/requirements/base.txt"
# Horovod compiles against the TensorFlow installed above, so it needs no build
# isolation. pip's wheel cache keeps the built wheel: later installs take minutes less.
HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_PYTORCH=1 \
  HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=gloo \
  "${PIP[@]}" install -q --no-build-isolation -c "$ROOT/requirements/constraints.txt" horovod
"${PIP[@]}" install -q --no-deps --no-build-isolation -e "$ROOT"
rm -f "$VENV"/.pins-*
touch "$stamp"
echo "setup: done"
