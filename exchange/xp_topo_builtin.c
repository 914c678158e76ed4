/* exchange/xp_topo_builtin.c — the built-in machines, the same text as
 * topologies/<name>.topo (a test checks they agree byte for byte). */
#include <stddef.h>
#include <string.h>

#include "exchange/xp_topo.h"

const char *const xp_topo_builtin_names[] = {"dgx-a100", "dgx-h100", "hgx-h200", "dgx-v100", "gb200-nvl72", "host", NULL};

static const char *const texts[] = {
    /* dgx-a100 */
    "# NVIDIA DGX A100: 8 x A100 on NVSwitch (non-blocking all-to-all).\n"
    "# NVLink 3: 300 GB/s per direction per GPU; HBM2 1.555 TB/s (40 GB part).\n"
    "name dgx-a100\n"
    "gpus 8\n"
    "hbm 1.555 TB/s\n"
    "peak 312 TFLOP/s\n"
    "port 300 GB/s\n"
    "rest direct\n"
    "# Per-action latency alpha (peer-copy launch + notification + sync): the\n"
    "# small-message floor of nccl-tests on NVLink machines is 5-20 us\n"
    "# (sendrecv/all_reduce_perf, 8 B rows, NVIDIA/nccl-tests published runs);\n"
    "# an estimate, not a measurement of ours. A100: 8 us.\n"
    "latency 8 us\n"
    "# Memory per GPU: A100 SXM4 40 GB part (NVIDIA A100 datasheet).\n"
    "memory 40 GB\n"
    "calibration a100\n",
    /* dgx-h100 */
    "# NVIDIA DGX H100: 8 x H100 SXM on NVSwitch (non-blocking all-to-all).\n"
    "# NVLink 4: 450 GB/s per direction per GPU; HBM3 3.35 TB/s. 1 GB = 10^9 B.\n"
    "name dgx-h100\n"
    "gpus 8\n"
    "hbm 3.35 TB/s\n"
    "peak 989 TFLOP/s\n"
    "port 450 GB/s\n"
    "rest direct\n"
    "# Per-action latency alpha (peer-copy launch + notification + sync): the\n"
    "# small-message floor of nccl-tests on NVLink machines is 5-20 us\n"
    "# (sendrecv/all_reduce_perf, 8 B rows, NVIDIA/nccl-tests published runs);\n"
    "# an estimate, not a measurement of ours. H100: 6 us.\n"
    "latency 6 us\n"
    "# Memory per GPU: H100 SXM5: 80 GB HBM3 (NVIDIA H100 datasheet).\n"
    "memory 80 GB\n"
    "calibration h100\n",
    /* hgx-h200 */
    "# NVIDIA HGX H200: 8 x H200 on NVSwitch (non-blocking all-to-all).\n"
    "# NVLink 4: 450 GB/s per direction per GPU; HBM3e 4.8 TB/s.\n"
    "name hgx-h200\n"
    "gpus 8\n"
    "hbm 4.8 TB/s\n"
    "peak 989 TFLOP/s\n"
    "port 450 GB/s\n"
    "rest direct\n"
    "# Per-action latency alpha: as dgx-h100 (same NVLink 4 and NVSwitch); an\n"
    "# estimate from published nccl-tests small-message results, 5-20 us.\n"
    "latency 6 us\n"
    "# Memory per GPU: H200 SXM: 141 GB HBM3e (NVIDIA H200 datasheet).\n"
    "memory 141 GB\n"
    "calibration h200\n",
    /* dgx-v100 */
    "# NVIDIA DGX-1 with V100 (DGX-V100): hybrid cube-mesh. Each GPU has six\n"
    "# NVLink 2 links of 25 GB/s per direction; some pairs have two (50 GB/s).\n"
    "# Adjacency as `nvidia-smi topo -m` prints it on a DGX-1V. Pairs without\n"
    "# NVLink go through a PCIe bridge of 15.75 GB/s shared by all of them.\n"
    "name dgx-v100\n"
    "gpus 8\n"
    "hbm 900 GB/s\n"
    "peak 125 TFLOP/s\n"
    "link 0 3 50 GB/s\n"
    "link 0 4 50 GB/s\n"
    "link 1 2 50 GB/s\n"
    "link 1 5 50 GB/s\n"
    "link 2 3 50 GB/s\n"
    "link 4 7 50 GB/s\n"
    "link 5 6 50 GB/s\n"
    "link 6 7 50 GB/s\n"
    "link 0 1 25 GB/s\n"
    "link 0 2 25 GB/s\n"
    "link 1 3 25 GB/s\n"
    "link 2 6 25 GB/s\n"
    "link 3 7 25 GB/s\n"
    "link 4 5 25 GB/s\n"
    "link 4 6 25 GB/s\n"
    "link 5 7 25 GB/s\n"
    "shared pcie 15.75 GB/s\n"
    "rest via pcie\n"
    "# Per-action latency alpha (peer-copy launch + notification + sync): the\n"
    "# small-message floor of nccl-tests on NVLink machines is 5-20 us\n"
    "# (sendrecv/all_reduce_perf, 8 B rows, NVIDIA/nccl-tests published runs);\n"
    "# an estimate, not a measurement of ours. V100: 10 us.\n"
    "latency 10 us\n"
    "# Memory per GPU: V100 SXM2 32 GB part (NVIDIA V100 datasheet).\n"
    "memory 32 GB\n"
    "calibration v100\n",
    /* gb200-nvl72 */
    "# NVIDIA GB200 NVL72: 72 x B200 in one NVLink domain (NVLink switch trays).\n"
    "# NVLink 5: 900 GB/s per direction per GPU; HBM3e 8 TB/s.\n"
    "name gb200-nvl72\n"
    "gpus 72\n"
    "hbm 8 TB/s\n"
    "peak 2.25 PFLOP/s\n"
    "port 900 GB/s\n"
    "rest direct\n"
    "# Per-action latency alpha: NVLink 5 through switch trays; an estimate from\n"
    "# published nccl-tests small-message results on NVLink machines, 5-20 us.\n"
    "latency 6 us\n"
    "# Memory per GPU: B200 in GB200 NVL72: 13.4 TB HBM3e over 72 GPUs (NVIDIA GB200 NVL72 page).\n"
    "memory 186 GB\n"
    "calibration b200\n",
    /* host */
    "# CPU \"devices\" (one worker process each) over POSIX shared memory.\n"
    "# Rough figures for one socket: a worker copies or aggregates at about\n"
    "# 20 GB/s (one thread's memcpy), and all copies share the memory bus.\n"
    "name host\n"
    "gpus 8\n"
    "hbm 20 GB/s\n"
    "peak 80 GFLOP/s\n"
    "port 20 GB/s\n"
    "shared membus 80 GB/s\n"
    "rest via membus\n"
    "# Per-action latency alpha: a ZeroMQ ipc:// notification between worker\n"
    "# processes plus a wake-up, roughly 20-50 us (ZeroMQ's published ipc\n"
    "# latency figures); an estimate.\n"
    "latency 30 us\n"
    "# Memory per GPU: a share of the host RAM per CPU device; kernel rates measured by einrun --calibrate.\n"
    "memory 2 GB\n"
    "calibration host\n",
};

const char *xp_topo_builtin_text(const char *name)
{
    for (int i = 0; xp_topo_builtin_names[i]; i++)
        if (strcmp(xp_topo_builtin_names[i], name) == 0)
            return texts[i];
    return NULL;
}
