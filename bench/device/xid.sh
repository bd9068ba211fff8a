#!/usr/bin/env bash
# xid.sh proves Loom's real Xid path on a machine with an NVIDIA GPU: a job
# whose CUDA kernel writes through a null pointer makes the driver raise an
# application Xid (31, a GPU memory page fault: the process's context is
# torn down, the GPU is fine). The node's agent, on the real driver, must
# see it through its NVML event set and publish it; health must classify it
# as the application's (RESTART_APP: the node stays in service); the agent's
# /metrics must show it; and the kernel's own line (dmesg) must parse with
# Loom's kernel-log parser.
#
# Build as for nvml.sh (the .devbin binaries), then: bash bench/device/xid.sh OUTDIR
set -u
out=${1:?usage: xid.sh OUTDIR}
log=xid-log.txt
. "$(dirname "$0")/lib.sh"
py=$(command -v python3)

step "kernel log before"
dmesg 2>&1 | grep -c 'NVRM: Xid' || true

step "loom up: a one-GPU node whose agent finds the real driver"
loom_up
cat >/tmp/xid.json <<'EOF'
{"name": "xid", "compute": {"node_pools": [{"id": "one", "machine_type": "a2-highgpu-1g", "node_count": 1}]}}
EOF
"$bin/loom" clusters create -f /tmp/xid.json
for _ in $(seq 60); do "$bin/loom" health nodes xid -o json 2>/dev/null | grep -q '"uuid"' && break; sleep 0.5; done
"$bin/loom" health nodes xid

step "a job whose kernel writes through a null pointer"
cat >/tmp/badkernel.py <<'EOF'
# A CUDA kernel that writes to address 0: an illegal address, which the
# driver reports as Xid 31 (MMU fault) and which ends this process's context.
import sys
try:
    import cupy as cp
    k = cp.RawKernel(r'''extern "C" __global__ void bad(int *p) { p[threadIdx.x] = 1; }''', "bad")
    k((1,), (32,), (cp.uint64(0),))
    cp.cuda.runtime.deviceSynchronize()
except ImportError:
    from numba import cuda
    import numpy as np
    @cuda.jit
    def bad(a):
        a[1 << 40] = 1
    d = cuda.to_device(np.zeros(4, dtype=np.int32))
    bad[1, 1](d)
    cuda.synchronize()
print("the kernel ran without a fault", file=sys.stderr)
sys.exit(3)
EOF
"$bin/loom" jobs submit --cluster xid --gpus-per-node 1 --wait -- "$py" /tmp/badkernel.py
"$bin/loom" jobs logs 1 | tail -5

step "health's view: the Xid seen, the node still in service"
for _ in $(seq 40); do "$bin/loom" health nodes xid -o json 2>/dev/null | grep -q '"lastXid"' && break; sleep 0.5; done
"$bin/loom" health nodes xid
"$bin/loom" health nodes xid -o json >"$out/xid-health-nodes.json"
"$bin/loom" slurm sinfo -M xid -R || true
agent_metrics | grep -E '^DCGM_FI_DEV_XID_ERRORS' | sed -E 's/[{].*[}]/{...}/'

step "the kernel's line"
dmesg 2>&1 | grep 'NVRM: Xid' | tail -5 | tee "$out/xid-dmesg.txt"

step "down"
"$bin/loom" clusters delete xid
loom_down
grep -iE 'xid' /tmp/loomdata/*/*.log 2>/dev/null | head -10
step "done"
