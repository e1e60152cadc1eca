#!/usr/bin/env bash
# Installs the Debian packages the SageMaker emulation and Horovod's MPI build need:
# Open MPI (mpirun, orted, headers), an ssh server and client, iproute2 (network
# namespaces), util-linux (unshare, taskset), curl (the toolkit polls with it).
# Runs apt-get only as root and only for what is missing; without root it says
# what is missing and which tests will skip, and carries on.
set -euo pipefail

PACKAGES=(openmpi-bin libopenmpi-dev openssh-server openssh-client iproute2 util-linux curl procps)
missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: missing system packages: ${missing[*]}" >&2
  echo "setup: install them as root (apt-get install ${missing[*]}); until then Horovod is built" >&2
  echo "setup: without MPI and the SageMaker emulation tests skip, saying so." >&2
  exit 0
fi
echo "setup: installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
