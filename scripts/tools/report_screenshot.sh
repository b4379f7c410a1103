#!/usr/bin/env bash
# Renders a study's report.html in headless Chromium (Debian's `chromium`) and saves a PNG, to
# check by eye that the report renders offline. Installs chromium when it is missing.
# Usage: scripts/tools/report_screenshot.sh OUTPUT_DIR [PNG]   (default PNG: OUTPUT_DIR/report.png)
set -euo pipefail
dir=${1:?usage: scripts/tools/report_screenshot.sh OUTPUT_DIR [PNG]}
png=${2:-$dir/report.png}
[[ -f $dir/report.html ]] || { echo "no $dir/report.html; run embcache report $dir first" >&2; exit 1; }
command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,2200 \
  --screenshot="$(realpath -m "$png")" "file://$(realpath "$dir/report.html")" 2>/dev/null
echo "screenshot: $png"
