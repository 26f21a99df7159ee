#!/usr/bin/env bash
# Opens a meshbench HTML report in headless Chromium and checks that it renders: Chromium
# exits cleanly, the page has as many inline SVG charts as figures, it loads nothing from the
# network, it fits a 1280-pixel window (the page no wider, and no table scrolling in its box),
# and the screenshot is saved. Usage: scripts/check-report.sh REPORT.html SHOT.png
set -euo pipefail
html=$(realpath "$1"); shot=$2
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "check-report: no chromium; run scripts/install-deps.sh" >&2; exit 2; }
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --disable-quic
       --disable-background-networking --disable-component-update --disable-sync
       --user-data-dir="$(mktemp -d)" --window-size=1280,2400)
log=$(mktemp)
# Chromium's own complaints about D-Bus and GPU in a container are not the page's errors.
dom=$(timeout 120 "$browser" "${flags[@]}" --enable-logging=stderr --dump-dom "file://$html" 2>"$log")
timeout 120 "$browser" "${flags[@]}" --screenshot="$shot" "file://$html" 2>>"$log" >/dev/null
if grep -E "CONSOLE|Failed to load resource|net::ERR" "$log" >&2; then
  echo "check-report: the page logged errors (above)" >&2; exit 1
fi
# The report has no script; a copy with one at its end measures the laid-out page (reading
# scrollWidth lays it out) and writes the widths into the DOM that --dump-dom prints.
probe=$(mktemp --suffix=.html)
sed 's#</body></html>#<script>var t=[].slice.call(document.querySelectorAll("div.table")).filter(function(d){return d.scrollWidth>d.clientWidth+1;}).length;document.body.setAttribute("data-width",document.documentElement.scrollWidth+" "+t);</script></body></html>#' "$html" >"$probe"
widths=$(timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$probe" 2>>"$log" | grep -o 'data-width="[0-9]* [0-9]*"' | grep -o '[0-9]* [0-9]*' || true)
rm -f "$probe"
read -r page_width scrolling <<<"${widths:-x x}"
[ "$page_width" != x ] || { echo "check-report: could not measure the page" >&2; exit 1; }
[ "$page_width" -le 1280 ] \
  || { echo "check-report: the page is $page_width pixels wide in a 1280-pixel window" >&2; exit 1; }
[ "$scrolling" -eq 0 ] \
  || { echo "check-report: $scrolling table(s) wider than the page scroll in their box" >&2; exit 1; }
figures=$(grep -o '<figure' <<<"$dom" | wc -l)
svgs=$(grep -o '<svg' <<<"$dom" | wc -l)
[ "$figures" -gt 0 ] && [ "$figures" -eq "$svgs" ] \
  || { echo "check-report: $figures figures but $svgs inline SVG charts rendered" >&2; exit 1; }
if grep -oE '(src|href)="https?://' "$html" >&2; then
  echo "check-report: the report loads something from the network" >&2; exit 1
fi
[ -s "$shot" ] || { echo "check-report: no screenshot written" >&2; exit 1; }
echo "check-report: $figures charts rendered, the page $page_width pixels wide in 1280; screenshot $shot ($(stat -c %s "$shot") bytes)"
