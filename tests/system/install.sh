#!/usr/bin/env bash
# `cmake --install` into a fresh prefix: the binary and the shipped model land
# there, and the installed binary, run from another directory with no
# SLUICE_MODEL, finds that model (not the source tree's) and writes the same
# completion as the build tree's binary.
#   install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(realpath "$1") source=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log"
model=$prefix/share/sluice/models/sluice-k3-mini
for f in "$prefix/bin/sluice" "$model/config.json" "$model/tokenizer.json" "$model/model.safetensors.index.json" \
         "$prefix/share/doc/sluice/README.md"; do
  [ -e "$f" ] || { echo "install.sh: $f was not installed"; cat "$tmp/install.log"; exit 1; }
done
# Every file of the shipped model, byte for byte.
for f in "$source"/models/sluice-k3-mini/*; do
  cmp "$f" "$model/$(basename "$f")"
done
mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"
unset SLUICE_MODEL
found=$("$prefix/bin/sluice" info --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["model"])')
[ "$found" = "$model" ] || { echo "install.sh: the installed binary uses $found, not $model"; exit 1; }
prompt="In the beginning God created"
installed=$("$prefix/bin/sluice" run "$prompt" --max-new 24 2> "$tmp/err")
head -1 "$tmp/err" | grep -q '^sluice: memory: ' || { echo "install.sh: no memory line first:"; cat "$tmp/err"; exit 1; }
built=$("$build/src/sluice" run "$prompt" --max-new 24 --model "$source/models/sluice-k3-mini" 2> /dev/null)
[ "$installed" = "$built" ] || { printf 'install.sh: different text:\n%s\n---\n%s\n' "$installed" "$built"; exit 1; }
[ "${installed#"$prompt"}" != "$installed" ] && [ ${#installed} -gt $(( ${#prompt} + 10 )) ] ||
  { echo "install.sh: no completion: $installed"; exit 1; }
echo "install.sh: $prefix/bin/sluice ran from $PWD with $found: ok"
