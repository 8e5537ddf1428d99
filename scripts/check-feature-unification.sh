#!/usr/bin/env bash
# Checks that `cargo test` (the library with its dev-dependencies) and the
# wheel (python/, `maturin develop`) resolve the same features for every
# crate the library depends on. A crate whose features differ is compiled
# twice, and so is everything above it: the wheel would rebuild arrow,
# parquet and parqivf (about 5 minutes on 2 cores in CI, and a second copy on
# disk). The pins that keep the two equal are in Cargo.toml's
# [dev-dependencies] and python/Cargo.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
features() {  # package -> "name version [features]" per crate, one line each
  cargo tree --locked "$@" -f '{p} [{f}]' --prefix none | sed 's/ (\*)//; s/ (proc-macro)//' | sort -u
}
lib_deps="$(cargo tree --locked -p parqivf -e normal,build -f '{p}' --prefix none | sed 's/ (\*)//; s/ (proc-macro)//' | awk '{print $1" "$2}' | sort -u)"
tests="$(features -p parqivf -e normal,build,dev)"
wheel="$(features -p parqivf-python -e normal,build)"
status=0
while read -r name version; do
  t="$(awk -v n="$name" -v v="$version" '$1 == n && $2 == v' <<<"$tests")"
  w="$(awk -v n="$name" -v v="$version" '$1 == n && $2 == v' <<<"$wheel")"
  if [ "$t" != "$w" ]; then
    echo "features differ for $name $version:"
    echo "  cargo test: ${t#* * }"
    echo "  wheel:      ${w#* * }"
    status=1
  fi
done <<<"$lib_deps"
[ "$status" = 0 ] && echo "feature unification: cargo test and the wheel share every crate below parqivf"
exit "$status"
