#!/usr/bin/env bash
# setup: everything `make test` needs besides Go, checked before any test runs (make test runs it
# first). What is missing is installed when this runs as root (Debian packages with apt-get, the
# Node libraries with npm ci); otherwise it names each missing package and the command that
# installs it, and fails. Go modules come from the proxy with the first build.
#
# Debian: redis-server and redis-tools (redis-cli) for the compatibility tests and the client
# matrix; the matrix's Python libraries (python3-redis: redis-py; python3-django-redis) and PHP
# ones (php-cli; php-redis: phpredis; php-predis; php-illuminate-cache and php-illuminate-redis:
# Laravel's cache locks; php-symfony-lock: Symfony Lock); chromium, which loads the status page
# headless; git, whose history the rolling-upgrade test builds the previous release from;
# postgresql (its server binaries in /usr/lib/postgresql/<version>/bin) and python3-psycopg2 for
# the fencing test (tests/fencing_test.go starts its own server in a temporary directory).
# npm: the Node libraries of tests/nodejs (package-lock.json), with the machine's Node.js 20.
set -euo pipefail
cd "$(dirname "$0")/.."

debs=()
need() { command -v "$1" >/dev/null 2>&1 || debs+=("$2"); }
need redis-server redis-server
need redis-cli redis-tools
need chromium chromium
need git git
need php php-cli
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null 2>&1 || debs+=(postgresql)
python=/usr/bin/python3
if [ -x "$python" ]; then
  "$python" -c 'import redis' 2>/dev/null || debs+=(python3-redis)
  "$python" -c 'import django_redis' 2>/dev/null || debs+=(python3-django-redis)
  "$python" -c 'import psycopg2' 2>/dev/null || debs+=(python3-psycopg2)
else
  debs+=(python3-redis python3-django-redis python3-psycopg2)
fi
if command -v php >/dev/null 2>&1; then
  php -r 'exit(extension_loaded("redis") ? 0 : 1);' 2>/dev/null || debs+=(php-redis)
  for lib in Predis/autoload.php:php-predis Illuminate/Cache/RedisLock.php:php-illuminate-cache \
    Illuminate/Redis/RedisManager.php:php-illuminate-redis Symfony/Component/Lock/Store/RedisStore.php:php-symfony-lock; do
    php -r 'exit(stream_resolve_include_path($argv[1]) ? 0 : 1);' "${lib%%:*}" 2>/dev/null || debs+=("${lib#*:}")
  done
else
  debs+=(php-redis php-predis php-illuminate-cache php-illuminate-redis php-symfony-lock)
fi

root=false
[ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 && root=true
if [ ${#debs[@]} -gt 0 ]; then
  if ! $root; then
    echo "make test needs these Debian packages, which are missing: ${debs[*]}" >&2
    echo "install them with:  sudo apt-get update && sudo apt-get install -y ${debs[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${debs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${debs[@]}" >/dev/null
fi

# The Node libraries, when node_modules is missing or older than the lock file.
command -v npm >/dev/null 2>&1 || {
  echo "make test needs Node.js 20 and npm (tests/nodejs): install them from nodejs.org or your distribution" >&2
  exit 1
}
stamp=tests/nodejs/node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ tests/nodejs/package-lock.json -nt "$stamp" ]; then
  echo "setup: npm ci in tests/nodejs"
  (cd tests/nodejs && npm ci --no-audit --no-fund --loglevel=error)
fi

# The rolling-upgrade test builds the previous release from history: a shallow clone has none.
if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then
  echo "setup: fetching the git history the rolling-upgrade test builds the previous release from"
  git fetch --unshallow --quiet ||
    echo "setup: warning: git fetch --unshallow failed; the rolling-upgrade test needs the previous release's commit" >&2
fi
