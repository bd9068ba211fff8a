"""restart.py measures, on one GPU, the training program's side of a restart
and of a checkpoint, which bench/cmd/ettrsim takes as assumptions: how long
an asynchronous checkpoint stalls training (the copy of the GPU state to
pinned host memory), how long it takes to be safe on disk, and how long a
fresh process takes from exec to its first step on the restored state
(interpreter, torch import, CUDA context, checkpoint load, first step).

  python3 bench/device/restart.py --gb 8 --dir /tmp/ckpt

It prints one markdown table row per size. Multi-node parts of a restart
(rendezvous, NCCL communicator set-up across thousands of GPUs) cannot be
measured on one GPU and are not in these numbers.
"""
import argparse
import os
import subprocess
import sys
import time


def child(path, t_exec):
    """The restarted process: report each phase's end, relative to exec."""
    t0 = time.time()
    import torch  # noqa: E402

    t_import = time.time()
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    t_cuda = time.time()
    state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    on_gpu = {k: v.to("cuda", non_blocking=False) for k, v in state.items()}
    torch.cuda.synchronize()
    t_load = time.time()
    # A first step: one matrix product per tensor, as a forward pass touches
    # every layer's weights.
    acc = torch.zeros((), device="cuda", dtype=torch.float32)
    for v in on_gpu.values():
        m = v.view(-1, 4096)[:4096]
        acc += (m @ m.T).float().sum()
    torch.cuda.synchronize()
    t_step = time.time()
    print(
        "PHASES %.3f %.3f %.3f %.3f %.3f"
        % (t0 - t_exec, t_import - t0, t_cuda - t_import, t_load - t_cuda, t_step - t_load)
    )


def measure(gb, d):
    import torch

    n = int(gb * (1 << 30) // (2 * 4096 * 4096))  # bf16 4096x4096 tensors
    state = {f"layer{i}": torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) for i in range(n)}
    size = sum(v.numel() * v.element_size() for v in state.values())
    host = {k: torch.empty(v.shape, dtype=v.dtype, pin_memory=True) for k, v in state.items()}
    torch.cuda.synchronize()
    # The stall: training waits while the state is copied to pinned memory.
    stalls = []
    for _ in range(3):
        t = time.time()
        for k, v in state.items():
            host[k].copy_(v, non_blocking=True)
        torch.cuda.synchronize()
        stalls.append(time.time() - t)
    # Safe: written and fsynced (in the background, while training goes on).
    path = os.path.join(d, f"ckpt-{gb}g.pt")
    t = time.time()
    torch.save(host, path)
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    persist = time.time() - t
    del state, host
    torch.cuda.empty_cache()
    dropped = "no"
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        dropped = "yes"
    except OSError as e:
        dropped = f"no ({e.strerror})"
    t_exec = time.time()
    out = subprocess.run(
        [sys.executable, __file__, "--child", path, "--t-exec", repr(t_exec)],
        capture_output=True, text=True, check=True,
    ).stdout
    total = time.time() - t_exec
    phases = [float(x) for x in out.split("PHASES", 1)[1].split()]
    os.remove(path)
    stalls.sort()
    return size, stalls[1], persist, dropped, phases, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, nargs="+", default=[8])
    ap.add_argument("--dir", default="/tmp/ckpt")
    ap.add_argument("--child")
    ap.add_argument("--t-exec", type=float)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.t_exec)
        return
    os.makedirs(a.dir, exist_ok=True)
    import torch

    print(f"GPU {torch.cuda.get_device_name(0)}, torch {torch.__version__}, Python {sys.version.split()[0]}")
    print()
    print("| GPU state | stall (copy to pinned memory, median of 3) | safe on disk (torch.save + fsync) | page cache dropped | restart: exec to interpreter | torch import | CUDA context | load | first step | restart total |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for gb in a.gb:
        size, stall, persist, dropped, ph, total = measure(gb, a.dir)
        print(
            f"| {size / (1 << 30):.1f} GiB | {stall:.3f} s ({size / stall / 1e9:.1f} GB/s) | {persist:.1f} s ({size / persist / 1e9:.2f} GB/s) | {dropped} "
            f"| {ph[0]:.2f} s | {ph[1]:.2f} s | {ph[2]:.2f} s | {ph[3]:.2f} s ({size / ph[3] / 1e9:.2f} GB/s) | {ph[4]:.2f} s | **{total:.1f} s** |"
        )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
