#!/bin/sh
# disk activity as on the pool: 50 MB written, synced and removed, over and over (ext4 `discard`)
f=$(mktemp /tmp/h20c-diskload.XXXXXX)
trap 'rm -f "$f"; exit 0' TERM INT
while :; do dd if=/dev/zero of="$f" bs=1M count=50 conv=fsync status=none; rm -f "$f"; done
