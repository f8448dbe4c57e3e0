#!/usr/bin/env bash
# Builds tests/oracle/target/oracle-v4.jar (RocketMQ 4.9.7) and oracle-v5.jar (RocketMQ 5.3.3) with their
# dependency folders target/lib-v4, target/lib-v5. Idempotent: skips when both jars are newer than every source.
# Uses the local Maven repository when possible (offline first, then online for a first download).
set -euo pipefail
cd "$(dirname "$0")"
newest_src=$(find pom.xml v4/pom.xml v5/pom.xml common/src v4/src v5/src -type f -newer target/oracle-v4.jar 2>/dev/null | head -1 || true)
newest_src5=$(find pom.xml v4/pom.xml v5/pom.xml common/src v4/src v5/src -type f -newer target/oracle-v5.jar 2>/dev/null | head -1 || true)
if [[ -f target/oracle-v4.jar && -f target/oracle-v5.jar && -d target/lib-v4 && -d target/lib-v5 \
      && -z "$newest_src" && -z "$newest_src5" && "${1:-}" != "--force" ]]; then
  exit 0
fi
command -v mvn >/dev/null || { echo "build.sh: mvn not found (need Maven 3.8+ and Java 17)" >&2; exit 1; }
command -v java >/dev/null || { echo "build.sh: java not found (need Java 17)" >&2; exit 1; }
# one build at a time (callers may run in parallel, e.g. pytest-xdist)
exec 9>"${TMPDIR:-/tmp}/rmqctl-oracle-build.lock"
flock 9
if ! mvn -o -q -B package >&2; then
  mvn -q -B package >&2
fi
for v in v4 v5; do
  if [[ ! -f target/oracle-$v.jar ]] || ! ls target/lib-$v/*.jar >/dev/null 2>&1; then
    echo "build.sh: target/oracle-$v.jar or target/lib-$v/ missing after the build" >&2
    exit 1
  fi
done
touch target/oracle-v4.jar target/oracle-v5.jar
