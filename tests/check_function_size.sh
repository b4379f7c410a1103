#!/usr/bin/env bash
# Fails when a function in src/ or apps/ is over 120 lines or over McCabe complexity 40, as
# Debian's pmccabe measures them (lambdas count towards the function that holds them).
# Usage: check_function_size.sh SOURCE_DIR
set -euo pipefail
cd "${1:?usage: check_function_size.sh SOURCE_DIR}"
command -v pmccabe >/dev/null || { echo "check_function_size: pmccabe is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
# pmccabe cannot parse GCC attributes (__attribute__((target_clones(...))), or the
# EMBCACHE_TARGET_CLONES(...) macro that spells it), and after an
# `override` or `final` it loses track of the class and skips its later methods (exiting 0): it
# measures copies without them, line for line, and any complaint it prints fails the check, so
# no function is left out.
copies=$(mktemp -d)
trap 'rm -rf "$copies"' EXIT
mapfile -t files < <(find src apps -name '*.cpp' -o -name '*.hpp' | sort)
for f in "${files[@]}"; do
  mkdir -p "$copies/$(dirname "$f")"
  sed -E 's/__attribute__\(\((target_clones|target)\([^)]*\)\)\)//g; s/EMBCACHE_TARGET_CLONES\([^)]*\)//g; s/\b(override|final)\b//g' "$f" >"$copies/$f"
done
cd "$copies"
if ! measures=$(pmccabe "${files[@]}" 2>"$copies/errors") || [[ -s "$copies/errors" ]]; then
  echo "check_function_size: pmccabe could not parse every file:" >&2
  cat "$copies/errors" >&2
  exit 1
fi
# pmccabe columns: modified McCabe, traditional McCabe, statements, first line, lines, file(line): name
over=$(awk -F'\t' '$1 + 0 > 40 || $5 + 0 > 120 { printf "  %s (%s lines, McCabe %s)\n", $6, $5, $1 }' <<<"$measures")
if [[ -n $over ]]; then
  echo "functions over 120 lines or McCabe 40; split them into steps with one job each:" >&2
  echo "$over" >&2
  exit 1
fi
longest=$(awk -F'\t' '$5 + 0 > n { n = $5 + 0; l = sprintf("%s, %s lines, McCabe %s", $6, $5, $1) } END { print l }' <<<"$measures")
echo "ok: $(wc -l <<<"$measures") functions in ${#files[@]} files, each within 120 lines and McCabe 40 (longest: $longest)"
