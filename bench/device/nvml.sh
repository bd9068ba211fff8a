#!/usr/bin/env bash
# nvml.sh proves Loom's real NVML path on a machine with an NVIDIA GPU, in
# one short run: nvmlprobe (every GpuSample field, time per collection, the
# Xid event set) idle and under a matrix-product load, NVIDIA's nvidia-smi
# reading the same fields for comparison, and then Loom itself: `loom up`
# with a two-node local cluster whose agents find the driver (-gpu-mode
# auto), their telemetry in `loom health nodes`, a job that runs
# nvidia-smi on a node, the agents' dcgm-exporter metrics, and a gpu_diag
# scan, which must fail the node that offers more GPUs than there are.
#
# Build the binaries on the Go machine first (the GPU machine has no Go):
#
#	mkdir -p .devbin
#	go build -ldflags=-s\ -w -o .devbin/loom ./cmd/loom && gzip -f .devbin/loom
#	go build -ldflags=-s\ -w -o .devbin/nvmlprobe ./bench/cmd/nvmlprobe && gzip -f .devbin/nvmlprobe
#
# then run `bash bench/device/nvml.sh OUTDIR` there. Without a driver it
# still runs (nvmlprobe says so; the agent simulates its GPUs), which is how
# it is tried before a GPU machine is spent on it.
set -u
out=${1:?usage: nvml.sh OUTDIR}
log=log.txt
. "$(dirname "$0")/lib.sh"

query=index,name,uuid,pci.bus_id,driver_version,temperature.gpu,temperature.memory,power.draw,power.limit,utilization.gpu,utilization.memory,memory.used,memory.total,clocks.sm,clocks.mem,clocks_event_reasons.active,ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.aggregate.total,ecc.errors.uncorrected.aggregate.total,retired_pages.pending,pcie.link.gen.current,pcie.link.width.current

step "machine"
uname -a; nproc; command -v nvidia-smi dcgmi nv-hostengine python3 || true
step "nvidia-smi"
if command -v nvidia-smi >/dev/null; then
	nvidia-smi
	nvidia-smi -q >"$out/smi-q.txt" 2>&1
	nvidia-smi --query-gpu=$query --format=csv
fi

step "nvmlprobe idle (50 rounds)"
"$bin/nvmlprobe" -rounds 50 >"$out/nvml-idle.md"
cat "$out/nvml-idle.md"

step "nvmlprobe under load (bf16 8192^3 matrix products for 25s)"
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
	python3 - <<'EOF' &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 25
n = 0
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    n += 20
print(f"load: {n} products of 8192^3 bf16 in 25s")
EOF
	load=$!
	sleep 8 # the clocks and power settle under the load (not synchronisation: a measurement window)
	"$bin/nvmlprobe" -rounds 20 >"$out/nvml-load.md"
	nvidia-smi --query-gpu=$query --format=csv
	cat "$out/nvml-load.md"
	wait "$load"
else
	echo "no CUDA torch here: no load run"
fi

step "loom up: a cluster whose agents find the real driver"
loom_up
# Two pools on the one GPU: an a3-ultragpu-8g node, which offers 8 GPUs
# where the driver lists 1 (gpu_diag must fail it), and an a2-highgpu-1g
# node, which offers 1 (gpu_diag must pass it).
cat >/tmp/h200.json <<'EOF'
{"name": "h200", "display_name": "The device machine's GPU",
 "compute": {"node_pools": [{"id": "eight", "machine_type": "a3-ultragpu-8g", "node_count": 1},
                            {"id": "one", "machine_type": "a2-highgpu-1g", "node_count": 1}]}}
EOF
"$bin/loom" clusters create -f /tmp/h200.json
"$bin/loom" nodes list --cluster h200
# The agents publish telemetry every LOOM_TELEMETRY_INTERVAL (10s): wait
# for health to show both nodes' GPUs.
for _ in $(seq 60); do [ "$("$bin/loom" health nodes h200 -o json 2>/dev/null | grep -c '"uuid"')" -ge 2 ] && break; sleep 0.5; done
"$bin/loom" health nodes h200
"$bin/loom" health nodes h200 -o json >"$out/health-nodes.json"

step "a job on the one-GPU node runs nvidia-smi (NVIDIA's, not Loom's simulated one)"
"$bin/loom" jobs submit --cluster h200 --gpus-per-node 1 --wait -- bash -c 'hostname; command -v nvidia-smi; nvidia-smi -L; nvidia-smi --query-gpu=name,memory.used,memory.reserved,memory.total,ecc.errors.uncorrected.volatile.total --format=csv'
"$bin/loom" jobs logs 1

step "the agents' /metrics (dcgm-exporter names)"
agent_metrics >"$out/agent-metrics.txt"
grep -E '^(DCGM_FI|loom_gpu|loom_node)' "$out/agent-metrics.txt" | grep -E 'gpu="0"|^loom_node' | sed -E 's/[{].*[}]/{...}/'

step "gpu_diag level 3 and disk on the real GPU"
"$bin/loom" health scan h200 --checks gpu_diag,disk --level 3 --param stress=1s --wait --wait-timeout 2m
"$bin/loom" health results h200 -o json >"$out/health-results.json"
"$bin/loom" health nodes h200

# The services' and the agents' logs come back in one file, for what the
# screens above do not say (the cluster's deletion removes the agents').
tar czf "$out/logs.tgz" /tmp/loom-up.log $(find /tmp/loomdata -name agent.log) 2>/dev/null
grep -ihE 'GPUs opened|fewer GPUs|node booted|agent killed' /tmp/loom-up.log $(find /tmp/loomdata -name agent.log) | cut -c1-200 | head -20

step "down"
"$bin/loom" clusters delete h200
loom_down
step "done"
