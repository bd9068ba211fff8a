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

# loom_up starts the embedded Loom (temporary data, the agents ended with
# it, the services logging at info to /tmp/loom-up.log) and waits until its
# gateway answers; loom_down stops it.
loom_up() {
	export LOOM_CONFIG_DIR=/tmp/loomcfg LOOM_DATA_DIR=/tmp/loomdata
	rm -rf /tmp/loomcfg /tmp/loomdata
	"$bin/loom" up --log-level info --stop-agents >/tmp/loom-up.log 2>&1 &
	up=$!
	for _ in $(seq 120); do "$bin/loom" clusters list >/dev/null 2>&1 && break; sleep 0.5; done
}
loom_down() {
	kill -INT "$up"
	wait "$up"
}

# agent_metrics prints the /metrics of the first agent that registered its
# address for Prometheus.
agent_metrics() {
	local target
	target=$(grep -ho '"[0-9.]*:[0-9]*"' /tmp/loomdata/metrics-sd/*.json 2>/dev/null | head -1 | tr -d '"')
	python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' "http://$target/metrics"
}
