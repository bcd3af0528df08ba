#!/usr/bin/env bash
# Fails (exit 1, naming each include) when a file of the core includes a folder of src/ that is not
# below its own: the core's folders include one way, downwards (docs/design.md, "Source map"), so
# no two of them can include each other. Its layers, lowest first; folders on one line stand
# side by side and include neither of each other. "top" is the files at the top of src/.
# Usage: check_include_layers.sh SRC_DIR
set -uo pipefail
src=${1:?usage: check_include_layers.sh SRC_DIR}
layers=(
  "util model"
  "format s3"
  "index"
  "io"
  "memory sim"
  "write"
  "read catalog"
  "top"
)
declare -A rank
for i in "${!layers[@]}"; do
  for folder in ${layers[$i]}; do rank[$folder]=$i; done
done
status=0
cd "$src" || exit 1
while IFS= read -r file; do
  from=top
  [[ $file == */* ]] && from=${file%%/*}
  if [ -z "${rank[$from]+x}" ]; then
    echo "$file: its folder $from/ has no layer in check_include_layers.sh" >&2
    status=1
    continue
  fi
  while IFS= read -r included; do
    [ -e "$included" ] || continue  # not a file of src/ (abseil, kvstream/, common/)
    to=top
    [[ $included == */* ]] && to=${included%%/*}
    [ "$to" = "$from" ] && continue
    if [ -z "${rank[$to]+x}" ] || [ "${rank[$to]}" -ge "${rank[$from]}" ]; then
      echo "$file includes $included: $to/ is not below $from/" >&2
      status=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(find . -name '*.h' -o -name '*.cc' | sed 's|^\./||' | sort)
exit $status
