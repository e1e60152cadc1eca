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
PIN_FILES=("$ROOT/requirements/base.txt" "$ROOT/requirements/dev.txt" "$ROOT/requirements/constraints.txt"
           "$ROOT/setup.cfg" "$ROOT/tools/setup_venv.sh" "$ROOT/tools/setup_system.sh")

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

bash "$ROOT/tools/setup_system.sh"

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
"${PIP[@]}" install -q -c "$ROOT/requirements/constraints.txt" -r "$ROOT/requirements/base.txt" \
  -r "$ROOT/requirements/dev.txt"
# Horovod compiles against the TensorFlow installed above, so it needs no build
# isolation; with Open MPI present it is built with MPI as well as Gloo, as in the
# SageMaker container. The built wheel is kept in a cache keyed by what it was built
# against (pip's own cache key does not see MPI), so later set-ups take minutes less.
HOROVOD_MPI=(HOROVOD_WITHOUT_MPI=1)
HOROVOD_VARIANT=gloo
if command -v mpicxx >/dev/null 2>&1; then
  HOROVOD_MPI=(HOROVOD_WITH_MPI=1)
  HOROVOD_VARIANT="gloo-mpi-$(mpirun --version 2>/dev/null | head -1 | awk '{print $NF}')"
fi
HOROVOD_PIN="$(grep -i '^horovod==' "$ROOT/requirements/constraints.txt")"
TF_PIN="$(grep -i '^tensorflow==' "$ROOT/requirements/constraints.txt")"
WHEELS="${HOROVOD_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/deepfm-strategies/wheels}/$(
  echo "$HOROVOD_PIN $TF_PIN $HOROVOD_VARIANT $("$VENV/bin/python" -V)" | sha256sum | cut -c1-16)"
if ! ls "$WHEELS"/horovod-*.whl >/dev/null 2>&1; then
  echo "setup: building $HOROVOD_PIN ($HOROVOD_VARIANT) against $TF_PIN; about 10 minutes"
  mkdir -p "$WHEELS"
  env "${HOROVOD_MPI[@]}" HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_PYTORCH=1 \
    HOROVOD_WITHOUT_MXNET=1 \
    "${PIP[@]}" wheel -q --no-deps --no-cache-dir --no-build-isolation -w "$WHEELS" "$HOROVOD_PIN"
fi
"${PIP[@]}" install -q --no-deps "$WHEELS"/horovod-*.whl
"${PIP[@]}" install -q --no-deps --no-build-isolation -e "$ROOT"
rm -f "$VENV"/.pins-*
touch "$stamp"
echo "setup: done"
