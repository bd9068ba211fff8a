# lib.sh is what the device scripts share; they source it after setting
# out (their output directory) and log (the name of their log in it).
#
# It unpacks the binaries: they travel gzipped in $LOOM_DEVBIN (default
# .devbin; a device machine takes 64 MiB of files) and are unpacked to
# /tmp/devbin, or used as they are where they are not gzipped. It sends
# everything printed to the log too, and defines step, which heads each
# part with the milliseconds since the start.
bin=${LOOM_DEVBIN:-.devbin}
mkdir -p "$out"
if [ -e "$bin/loom.gz" ]; then
	mkdir -p /tmp/devbin
	for f in "$bin"/*.gz; do gunzip -c "$f" >"/tmp/devbin/$(basename "$f" .gz)"; done
	chmod +x /tmp/devbin/*
	bin=/tmp/devbin
fi
exec > >(tee "$out/$log") 2>&1
t0=$(date +%s%N)
step() { printf '\n===== %s (+%dms)\n' "$*" $((($(date +%s%N) - t0) / 1000000)); }
