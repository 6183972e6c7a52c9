#!/usr/bin/env bash
# K25 fabric qualification and K23 NVML admission on 2 x H200 of ONE host (NVLink, not a fabric).
# Run from the repo root on the lent machine: bash docs/evidence/fabric-h200x2/run.sh OUTDIR
# Needs torch+CUDA+NCCL there; pydantic & co. carried as wheels in .whl/ (nothing can be fetched there).
set -u
out=${1:?OUTDIR}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site
{ nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.free --format=csv; nvidia-smi topo -m; } \
  > "$out/topology.txt" 2>&1
python3 - > "$out/fingerprint.json" 2>&1 <<'PY'
import json, os, torch
from appliance.multinode.fabric import nccl_library_path, nccl_library_sha256, ib_devices, fabric_mtu
print(json.dumps({"nccl_library": str(nccl_library_path(os.environ)), "nccl_library_sha256": nccl_library_sha256(os.environ),
                  "torch_nccl": ".".join(map(str, torch.cuda.nccl.version())), "ib_devices": ib_devices(os.environ),
                  "fabric_mtu(eth0)": fabric_mtu("eth0"), "torch": torch.__version__}, indent=1))
PY
q() { python3 -m appliance.multinode.fabric here --backend nccl --world 2 "$@"; }
# 1. NCCL's own choice (P2P over NVLink), GB10's floor (8 GB/s, 200 us): passes.
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET q --port 29621 --mib 64 --iters 10 --min-gbps 8 --max-latency-us 200 \
  > "$out/nccl-nvlink-64MiB.jsonl" 2> "$out/nccl-nvlink-64MiB.stderr.log"
q --port 29622 --mib 1024 --iters 10 > "$out/nccl-nvlink-1GiB.jsonl" 2>&1
# 2. The same NCCL forced onto sockets (P2P and SHM off): what a fabric that fell back looks like; GB10's floor refuses.
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
  q --port 29623 --mib 64 --iters 5 --min-gbps 8 --max-latency-us 200 \
  > "$out/nccl-sockets-64MiB.jsonl" 2> "$out/nccl-sockets-64MiB.stderr.log"
echo "sockets exit: $?" >> "$out/nccl-sockets-64MiB.jsonl"
# 3. K23 admission against NVML's free device memory (the profile targets SM120, so gpu.arch fails too).
python3 -m appliance doctor rtx-pro-6000-tp2 --json > "$out/doctor-rtx-pro-6000-tp2.json" 2>&1

grep -h -E "NCCL INFO (Channel 00|Using network|.*via (P2P|NET|SHM))" "$out"/nccl-*.stderr.log | sort | uniq -c | head -20
cat "$out"/nccl-*.jsonl | cut -c1-400
