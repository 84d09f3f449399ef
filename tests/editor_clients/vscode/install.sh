#!/usr/bin/env bash
# Installs what the VS Code end-to-end test drives, from package-lock.json beside this script:
# code-server (VS Code in the browser) and playwright-core. Needs Node 20, `rg` (Debian's
# ripgrep) and the headers for node-pty's build (libkrb5-dev); `make install-editors` sees to those.
#
# Why it is not a plain `npm ci`:
# * code-server 4.100.3 is the last release that runs on Node 20. Its postinstall runs `npm install`
#   for VS Code's own dependencies, whose install scripts npm 11 refuses (EALLOWSCRIPTS): so npm 10
#   (a local copy when the machine's npm is another), with --unsafe-perm as root, and
#   npm_config_yes=true because node-pty's build calls `npx node-gyp`.
# * @vscode/ripgrep's postinstall downloads rg from GitHub, which is out of reach: its download
#   cache (under TMPDIR) is seeded with the machine's own rg, packed under the name it looks for.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../../build}/editor-clients
mkdir -p "$build"
build=$(cd "$build" && pwd)

node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" != 20 ]; then
  echo "install.sh: code-server 4.100.3 needs Node 20, this is $(node --version)" >&2
  exit 1
fi
npm=npm
if [ "$(npm --version | cut -d. -f1)" != 10 ]; then
  npm install --silent --prefix "$build/npm10" npm@10.9.9
  npm=$build/npm10/node_modules/.bin/npm
fi

# The ripgrep that code-server's VS Code pins (lib/vscode/npm-shrinkwrap.json): @vscode/ripgrep
# 1.15.11 fetches ripgrep-v13.0.0-10-<target>.tar.gz into $TMPDIR/vscode-ripgrep-cache-1.15.11.
rg=$(command -v rg) || { echo "install.sh: rg is missing (apt-get install ripgrep)" >&2; exit 1; }
case "$(uname -m)" in
  x86_64) target=x86_64-unknown-linux-musl ;;
  aarch64) target=aarch64-unknown-linux-musl ;;
  *) echo "install.sh: no ripgrep seed for $(uname -m)" >&2; exit 1 ;;
esac
tmp=$build/tmp
rm -rf "$tmp" && mkdir -p "$tmp/vscode-ripgrep-cache-1.15.11" "$tmp/rg"
cp "$rg" "$tmp/rg/rg"
tar czf "$tmp/vscode-ripgrep-cache-1.15.11/ripgrep-v13.0.0-10-$target.tar.gz" -C "$tmp/rg" rg

# node-gyp builds against the installed Node's headers (no download).
nodedir=$(dirname "$(dirname "$(command -v node)")")
cd "$here"
TMPDIR=$tmp npm_config_yes=true npm_config_nodedir=$nodedir "$npm" ci --unsafe-perm --no-audit --no-fund
test -x node_modules/code-server/lib/vscode/node_modules/@vscode/ripgrep/bin/rg
echo "install.sh: code-server $(node_modules/.bin/code-server --version | head -1)"
