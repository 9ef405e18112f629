#!/usr/bin/env bash
# Installs what tests/test_browser.py needs: Debian's Chromium (never a browser
# download) and the Python `playwright` package in ./.venv; and Node.js (Debian's)
# where the machine has none, for tests/test_widget_js.py. Idempotent; as root
# (CI) it uses apt-get directly, otherwise through sudo.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x /usr/bin/chromium ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium
fi
# Node.js runs the widget's pure functions in tests/test_widget_js.py.
if ! command -v node >/dev/null; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q nodejs
fi
if [ -x .venv/bin/python ] && ! .venv/bin/python -c "import playwright" 2>/dev/null; then
  .venv/bin/python -m pip install -q --disable-pip-version-check playwright
fi
/usr/bin/chromium --version
