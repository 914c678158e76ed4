/* coordinator/compile/co_topo.h — the topology of the GPUs a run uses, detected
 * from a probe (`einworker-cuda --probe`, worker/wk_probe.h).
 *
 * Probe text, one statement a line (blank lines and lines starting with
 * '#' are skipped):
 *
 *   einprobe 1                  # format version, the first statement
 *   gpu 0 NVIDIA H200           # every visible GPU, ids 0..n-1 in order
 *   peer 0 1 1 0                # peer A B ACCESS(0|1) PERF-RANK, every
 *                               # ordered pair of distinct GPUs once, after
 *                               # the gpu lines
 *
 * The parser is strict: anything else fails with EIN_EPARSE and
 * "FILE:LINE:COL: <what was expected>".
 *
 * co_topo_detect builds the xp_topology of a run whose worker k runs on
 * GPU gpu_ids[k] of the probe (ids may repeat: several workers on one
 * GPU). The topology has one GPU index per worker. Its figures are read
 * from the built-in machines (xp_machines, made from the .topo files in topologies/),
 * chosen by a substring of the GPU name, their `#@ detect` lines (today
 * H100 -> dgx-h100, H200 -> hgx-h200, A100 -> dgx-a100, V100 -> dgx-v100,
 * B200 or GB200 -> gb200-nvl72; the longest match wins). A pair of GPUs
 * is peer-accessible when the probe says so in both directions. Rules, in
 * order:
 *
 *  1. 8 workers on 8 distinct GPUs of a family whose built-in is an
 *     8-GPU switch machine (H100, H200, A100), all pairs peer-accessible:
 *     that built-in, name kept.
 *  2. A probe of exactly 8 V100 whose peer matrix is the NVLink adjacency
 *     of the dgx-v100 text (the DGX-1 cube mesh, GPU ids as CUDA numbers
 *     them): the dgx-v100 built-in itself when the run is GPUs 0..7 in
 *     order, otherwise a topology named `detected` with the dgx-v100 links
 *     and PCIe bridge between the run's GPUs (a probe whose GPUs CUDA
 *     numbers in another order falls to rule 3, one NVLink per pair).
 *  3. Otherwise a generated topology named `detected`:
 *     - all pairs of the run's GPUs peer-accessible: a switch family gets
 *       the family's `port` and `rest direct`; V100 (no switch) a link of
 *       one NVLink 2 (the smallest link of the dgx-v100 text) per pair;
 *     - some pairs not peer-accessible: those go through one shared `pcie`
 *       resource (the family's PCIe: Gen5 x16 for H100/H200/B200, Gen4 x16
 *       for A100, the dgx-v100 text's Gen3 x16 for V100); peer pairs get a
 *       link (V100: one NVLink 2; switch families: the port bandwidth);
 *     - a name containing "PCIe" (a PCIe card: no NVSwitch) or an unknown
 *       or mixed set of GPUs: every copy between GPUs through one shared
 *       PCIe bridge (PCIe cards: their family's generation; unknown: Gen3
 *       x16 and the dgx-v100 HBM, the smallest figures we have).
 *  Workers sharing a GPU copy between them inside its HBM (each byte read
 *  and written there): hbm/2. When every worker is on one GPU that is one
 *  shared resource all their copies go through, as it is on the GPU.
 *  Otherwise it is a link per pair of such workers; xp_topo cannot say
 *  that those links share one HBM, nor, with a `port`, that they bypass it
 *  (they are capped at the port bandwidth), nor that workers on one GPU
 *  share its HBM for aggregation and its NVLink port. The generated text
 *  says so in its comments.
 *
 * The probe's PERF-RANK is parsed but not used: CUDA defines it only as a
 * relative rank (0 best), with no scale to turn into bandwidth.
 *
 * Ownership: co_topo_probe_free releases a probe; the topology is the
 * caller's (xp_topo_free). On error every function returns a negative
 * EIN_E* code, fills `err` and leaves its outputs untouched. */
#ifndef CO_TOPO_H
#define CO_TOPO_H

#include <stddef.h>

#include "common/base/ein_error.h"
#include "exchange/xp_topo.h"

#define CO_TOPO_MAX_GPUS 1024
#define CO_TOPO_NAME_MAX 256

/* PCIe x16 bandwidth per direction after 128b/130b encoding: 8, 16 and
 * 32 GT/s x 16 lanes x 128/130 / 8 bits (PCI-SIG base specifications 3.0,
 * 4.0 and 5.0). Gen3 is the dgx-v100 text's 15.75 GB/s. */
#define CO_TOPO_PCIE_GEN4 31.5e9
#define CO_TOPO_PCIE_GEN5 63.0e9

typedef struct co_topo_probe {
    int ngpus;
    char (*name)[CO_TOPO_NAME_MAX]; /* [ngpus] */
    unsigned char *access;          /* [a*ngpus+b]: a can access b's memory */
    int *rank;                      /* [a*ngpus+b]: CUDA's P2P performance rank */
} co_topo_probe;

/* `file` names the text in messages (NULL: "<probe>"). */
int co_topo_probe_parse(const char *text, const char *file, co_topo_probe **out,
                        ein_error *err);
int co_topo_probe_load(const char *path, co_topo_probe **out, ein_error *err);
void co_topo_probe_free(co_topo_probe *p);

/* `why` (may be NULL) gets one human line on what was seen and chosen,
 * e.g. "8 x NVIDIA H200, all pairs peer-accessible: hgx-h200". */
int co_topo_detect(const co_topo_probe *probe, const int *gpu_ids, int nworkers,
                   xp_topology **out, char *why, size_t whylen, ein_error *err);

#endif
