#!/usr/bin/env bash
# Installs what the python tool's sandbox needs from Debian: libseccomp2 (the
# seccomp filter is compiled by it, through pyseccomp) and util-linux's setpriv
# (tests/test_sandbox.py runs the sandbox as an unprivileged user with it).
# Idempotent; as root (CI) it uses apt-get directly, otherwise through sudo.
set -euo pipefail
if ! ldconfig -p | grep -q 'libseccomp\.so\.2' || ! command -v setpriv >/dev/null; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q libseccomp2 util-linux
fi
ldconfig -p | grep 'libseccomp\.so\.2'
