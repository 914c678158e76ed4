"""einsummable._stats — what a run measured (Program.last_stats, from the
library's ein_run_stats) and what the simulator predicts
(Program.predict(), from ein_compiled_predict)."""

from dataclasses import dataclass, field
from typing import Any, List


@dataclass(frozen=True)
class DeviceStats:
    """One device's part of a run, as its worker measured it (seconds).

    pid: the worker process; total: the run on this device; kernel: time
    in kernels; copy: in copies from peers; wait: waiting for peers;
    device_timed: True when kernel and copy are the GPU's own time (CUDA
    events), False when they are the host's (CPU devices); graphs_captured
    / graphs_launched / graphs_failed: graph replay since the session
    started (compileGraph's graphs option, einrun --graphs)."""

    device: int
    pid: int
    total: float
    kernel: float
    copy: float
    wait: float
    device_timed: bool = False
    graphs_captured: int = 0
    graphs_launched: int = 0
    graphs_failed: int = 0


@dataclass(frozen=True)
class RunStats:
    """The last execute(): wall_s (the whole run as the caller saw it) and
    one DeviceStats per device."""

    wall_s: float
    devices: List[DeviceStats] = field(default_factory=list)

    def __str__(self) -> str:
        lines = ["run: %.3f ms" % (self.wall_s * 1e3)]
        for d in self.devices:
            lines.append("  device %d (pid %d): %.3f ms, kernels %.3f, copies %.3f, "
                         "waiting %.3f" % (d.device, d.pid, d.total * 1e3, d.kernel * 1e3,
                                           d.copy * 1e3, d.wait * 1e3))
        return "\n".join(lines)


@dataclass(frozen=True)
class DevicePrediction:
    """One device's predicted iteration (seconds; bytes): compute (kernels,
    aggregations, slices), comm (copies and notifications), idle (the rest
    of the iteration), end (when its last instruction ends), peak_bytes
    (its memory: every buffer of its program)."""

    device: int
    compute: float
    comm: float
    idle: float
    end: float
    peak_bytes: int


@dataclass(frozen=True)
class Prediction:
    """Program.predict(): one iteration as the simulator replays the
    compiled per-device programs on the topology with a calibrated roofline
    (einplan --simulate; docs/simulator.md). time: the predicted iteration
    (s); makespan: the same without the calibration's per-iteration cost;
    path_compute / path_comm / path_wait: the critical path's split;
    calibration: the roofline used; devices: one DevicePrediction each."""

    time: float
    makespan: float
    path_compute: float
    path_comm: float
    path_wait: float
    calibration: str
    devices: List[DevicePrediction] = field(default_factory=list)

    @property
    def peak_bytes(self) -> int:
        """The largest device's memory (bytes)."""
        return max((d.peak_bytes for d in self.devices), default=0)

    def __str__(self) -> str:
        lines = ["predicted iteration: %.3f ms (calibration %s); critical path: compute "
                 "%.3f ms, communication %.3f ms, waiting %.3f ms"
                 % (self.time * 1e3, self.calibration, self.path_compute * 1e3,
                    self.path_comm * 1e3, self.path_wait * 1e3)]
        for d in self.devices:
            lines.append("  device %d: compute %.3f ms, communication %.3f ms, idle %.3f ms, "
                         "peak memory %d bytes" % (d.device, d.compute * 1e3, d.comm * 1e3,
                                                   d.idle * 1e3, d.peak_bytes))
        return "\n".join(lines)


def run_stats(c: Any) -> RunStats:
    """RunStats from a filled ein_run_stats (ctypes)."""
    devs = []
    for d in range(min(int(c.ndev), 64)):
        s, g = c.dev[d], c.graphs[d]
        devs.append(DeviceStats(device=d, pid=int(s.pid), total=float(s.total),
                                kernel=float(s.kernel), copy=float(s.copy),
                                wait=float(s.wait), device_timed=bool(c.device_timed[d]),
                                graphs_captured=int(g.captured), graphs_launched=int(g.launched),
                                graphs_failed=int(g.failed)))
    return RunStats(wall_s=float(c.wall_s), devices=devs)
