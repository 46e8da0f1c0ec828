# Sourced by test.sh and test-bundled.sh: sum_results LOG WORD sums the
# counts before WORD ("passed", "failed") on cargo's "test result:" lines.
# awk, not grep: a grep that matches nothing (a build that failed) would
# end the caller under `set -e -o pipefail`.
sum_results() {
  awk -v w="$2" '/^test result:/ {for (i = 2; i <= NF; i++) if ($i ~ "^" w ";?$") s += $(i - 1)} END {print s + 0}' "$1"
}
