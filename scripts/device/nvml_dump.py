#!/usr/bin/env python3
"""Raw NVML answers of this machine as JSON (a cross-check beside `servetune hardware --record-nvml`).
usage: python3 scripts/device/nvml_dump.py OUT.json"""

import json
import sys

import pynvml as N


def q(fn, *a):
    try:
        v = fn(*a)
        return v.decode() if isinstance(v, bytes) else v
    except Exception as e:  # record the NVML error as the answer
        return {"error": type(e).__name__, "message": str(e)}


N.nvmlInit()
out = {
    "driver_version": q(N.nvmlSystemGetDriverVersion),
    "cuda_driver_version": q(N.nvmlSystemGetCudaDriverVersion),
    "cuda_driver_version_v2": q(getattr(N, "nvmlSystemGetCudaDriverVersion_v2", N.nvmlSystemGetCudaDriverVersion)),
    "nvml_version": q(N.nvmlSystemGetNVMLVersion),
    "device_count": q(N.nvmlDeviceGetCount),
    "devices": [],
}
for i in range(out["device_count"] if isinstance(out["device_count"], int) else 0):
    h = N.nvmlDeviceGetHandleByIndex(i)
    mem = q(N.nvmlDeviceGetMemoryInfo, h)
    d = {
        "index": i,
        "name": q(N.nvmlDeviceGetName, h),
        "uuid": q(N.nvmlDeviceGetUUID, h),
        "pci_bus_id": q(lambda x: N.nvmlDeviceGetPciInfo(x).busId, h),
        "cuda_compute_capability": q(N.nvmlDeviceGetCudaComputeCapability, h),
        "memory": mem if isinstance(mem, dict) else {"total": mem.total, "free": mem.free, "used": mem.used},
        "architecture": q(N.nvmlDeviceGetArchitecture, h),
        "multiprocessor_count": q(lambda x: N.nvmlDeviceGetAttributes(x).multiprocessorCount, h),
        "power_limit_mw": q(N.nvmlDeviceGetPowerManagementLimit, h),
        "max_clocks_mhz": {
            "sm": q(N.nvmlDeviceGetMaxClockInfo, h, N.NVML_CLOCK_SM),
            "mem": q(N.nvmlDeviceGetMaxClockInfo, h, N.NVML_CLOCK_MEM),
        },
        "mig_mode": q(N.nvmlDeviceGetMigMode, h),
        "nvlink": [],
    }
    for link in range(18):
        st = q(N.nvmlDeviceGetNvLinkState, h, link)
        d["nvlink"].append({"link": link, "state": st})
        if isinstance(st, dict):  # NotSupported etc.: one answer is enough
            break
    out["devices"].append(d)
N.nvmlShutdown()
with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=1, default=str)
print(json.dumps(out, default=str)[:2000])
