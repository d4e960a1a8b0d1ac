#!/usr/bin/env bash
# The .deb CPack builds: named sluice, Depends from the libraries the binary
# links, holding /usr/bin/sluice (stripped) and the shipped model under
# /usr/share/sluice; unpacked (dpkg-deb -x, no root needed), its binary runs the
# main job from another directory with that model.
#   deb.sh BUILD_DIR
set -euo pipefail
build=$(realpath "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cpack --config "$build/CPackConfig.cmake" -B "$tmp/pkg" > "$tmp/cpack.log" 2>&1 || { cat "$tmp/cpack.log"; exit 1; }
deb=$(ls "$tmp"/pkg/sluice_*.deb)
info=$(dpkg-deb -I "$deb")
echo "$info" | grep -q '^ Package: sluice$' || { echo "$info"; exit 1; }
# (XXH3 is compiled into the binary, util/xxh3.h: no libxxhash.)
for lib in liburing libcurl libfmt libpcre2-8; do
  echo "$info" | grep '^ Depends:' | grep -q "$lib" || { echo "deb.sh: Depends lacks $lib:"; echo "$info"; exit 1; }
done
contents=$(dpkg-deb -c "$deb")
for f in ./usr/bin/sluice ./usr/share/sluice/models/sluice-k3-mini/config.json \
         ./usr/share/sluice/models/sluice-k3-mini/tokenizer.json; do
  echo "$contents" | grep -q " $f\$" || { echo "deb.sh: $f missing from the package"; echo "$contents"; exit 1; }
done
dpkg-deb -x "$deb" "$tmp/root"
if file "$tmp/root/usr/bin/sluice" | grep -q 'with debug_info'; then echo "deb.sh: the binary is not stripped"; exit 1; fi
mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"
unset SLUICE_MODEL
found=$("$tmp/root/usr/bin/sluice" info --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["model"])')
[ "$found" = "$tmp/root/usr/share/sluice/models/sluice-k3-mini" ] || { echo "deb.sh: uses the model $found"; exit 1; }
out=$("$tmp/root/usr/bin/sluice" run "And God said" --max-new 16 2> /dev/null)
[ "${out#And God said}" != "$out" ] && [ ${#out} -gt 20 ] || { echo "deb.sh: no completion: $out"; exit 1; }
echo "deb.sh: $(basename "$deb") ($(du -h "$deb" | cut -f1)) ok: $out"
