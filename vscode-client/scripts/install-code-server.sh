#!/usr/bin/env bash
# Installs code-server (VS Code in a browser, for the end-to-end test) into vscode-client/.e2e/code-server.
# 4.100.3 is the last release that runs on Node 20. Its postinstall builds native modules (Debian:
# libkrb5-dev libxkbfile-dev libsecret-1-dev pkg-config) and @vscode/ripgrep's installer downloads `rg`
# from a host CI cannot reach: the same binary comes from the npm package @vscode/ripgrep-linux-x64,
# placed in the installer's download cache as the archive it expects.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=4.100.3
DEST=.e2e/code-server
if [ -x "$DEST/node_modules/.bin/code-server" ] && [ "$("$DEST/node_modules/.bin/code-server" --version | head -1 | cut -d' ' -f1)" = "$VERSION" ]; then
  echo "code-server $VERSION already in $DEST"
  exit 0
fi
mkdir -p "$DEST" .e2e/tmp
scratch=$(mktemp -d "$PWD/.e2e/tmp/rg.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# The ripgrep installer's cache: $TMPDIR/vscode-ripgrep-cache-<its version>/ripgrep-<rg tag>-<target>.tar.gz
# (names read from @vscode/ripgrep 1.15.11, the version code-server's lockfile pins).
RG_PACKAGE_VERSION=1.15.11
RG_ASSET=ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz
(cd "$scratch" && npm pack --silent @vscode/ripgrep-linux-x64@1.18.0 >/dev/null && tar xzf vscode-ripgrep-linux-x64-*.tgz)
export TMPDIR="$PWD/.e2e/tmp"
mkdir -p "$TMPDIR/vscode-ripgrep-cache-$RG_PACKAGE_VERSION"
tar czf "$TMPDIR/vscode-ripgrep-cache-$RG_PACKAGE_VERSION/$RG_ASSET" -C "$scratch/package/bin" rg

export npm_config_unsafe_perm=true npm_config_yes=true
# npm 11 skips dependencies' install scripts unless approved; code-server's postinstall runs a nested
# `npm install` of VS Code's own pinned (npm-shrinkwrap.json) dependencies, whose native modules must build.
# The approval is for this one install of a pinned tool, not for the extension's dependencies.
export npm_config_dangerously_allow_all_scripts=true
npm install --prefix "$DEST" --no-save --no-package-lock --no-audit --no-fund "code-server@$VERSION"
"$DEST/node_modules/.bin/code-server" --version
