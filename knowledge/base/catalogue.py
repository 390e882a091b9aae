"""The metric catalogue: every name a rule may use, its unit and what it means.

Rules are written over flat names (``gpu_util_mean``, ``phase_data_wait``), so a
rule file can be checked at load time: a name that is not in the catalogue is an
error with file and line. Series metrics are sampled every tick and summarised
over the window with each aggregate (``_mean``, ``_p5``, ``_p95``, ``_last``,
``_min``, ``_max``, ``_stdev``, ``_trend`` per minute); scalar metrics are one
number per window. The catalogue is apart from the computation (``knowledge/metrics/``)
because reading a rule file needs the names only, not the probes' sample types.
"""

from __future__ import annotations

from dataclasses import dataclass

from aitop.probes.session import PHASES

AGGREGATES: tuple[str, ...] = ("mean", "p5", "p95", "last", "min", "max", "stdev", "trend")


@dataclass(frozen=True)
class MetricSpec:
    name: str
    unit: str
    description: str
    series: bool


#: Series metrics: (name, unit, description); ``metrics.series.series_values`` computes
#: each, by name.
SERIES: tuple[tuple[str, str, str], ...] = (
    ("gpu_util", "%",
     "GPU utilisation: share of time a kernel was running (NVML)"),
    ("gpu_mem_used", "%",
     "GPU memory used, % of capacity"),
    ("gpu_temp_margin", "°C",
     "degrees below the GPU's slowdown threshold (83 °C if the driver does not say)"),
    ("gpu_power", "%",
     "power draw, % of the enforced limit"),
    ("gpu_sm_clock", "%",
     "SM clock, % of its maximum"),
    ("gpu_pcie_rx", "MB/s",
     "PCIe host-to-GPU traffic"),
    ("gpu_job_sm", "%",
     "SM utilisation of the job's own processes on the GPUs it uses (NVML, per process)"),
    ("gpu_other_sm", "%",
     "SM utilisation of processes outside the job on the GPUs it uses (NVML, per process)"),
    ("host_cpu", "%",
     "whole-machine CPU utilisation"),
    ("host_iowait", "%",
     "CPU time waiting on I/O"),
    ("host_ram_used", "%",
     "system RAM used"),
    ("host_swap_used", "%",
     "swap used (0 when the machine has no swap)"),
    ("host_load_per_core", "",
     "1-minute load average per core"),
    ("proc_cpu", "% of a core",
     "CPU of the whole target tree (main process and workers)"),
    ("main_cpu", "% of a core",
     "CPU of the main training process"),
    ("main_kernel", "% of a core",
     "CPU the kernel spent on the main training process's behalf (system time: forks, page "
     "faults, the page copies a write after a fork makes, system calls)"),
    ("main_busy_threads", "threads",
     "threads of the main process keeping at least 10 % of a core busy"),
    ("workers_cpu", "% of a core",
     "CPU of all DataLoader workers together"),
    ("worker_cpu_max", "% of a core",
     "CPU of the busiest DataLoader worker"),
    ("main_cpu_wait", "% of a core",
     "time the main process's main thread was runnable but waiting for a CPU (contention)"),
    ("worker_cpu_wait", "% of a core",
     "time the average DataLoader worker was runnable but waiting for a CPU (contention)"),
    ("proc_cpu_wait", "% of a core",
     "time the main threads of the job's processes were runnable but waiting for a CPU, "
     "summed: what busy neighbours cost it"),
    ("worker_blocked", "%",
     "time the average DataLoader worker neither ran nor waited for a CPU: asleep on its "
     "reads or a lock"),
    ("proc_rss", "MB",
     "resident memory of the target tree"),
    ("proc_read", "MB/s",
     "bytes the target tree reads from storage"),
    ("proc_write", "MB/s",
     "bytes the target tree writes to storage"),
    ("disk_read", "MB/s",
     "read rate of the busiest disk behind the target's files"),
    ("disk_write", "MB/s",
     "write rate of the busiest disk behind the target's files"),
    ("disk_busy", "%",
     "busy time of the busiest disk behind the target's files"),
)

SCALARS: tuple[tuple[str, str, str], ...] = (
    ("has_gpu", "0/1", "1 when NVML sees at least one GPU"),
    ("host_ram_free_mb", "MB", "system RAM not in use at the window's end"),
    ("other_procs_cpu", "cores", "CPU that processes outside the job (and aitop) keep busy"),
    ("amp_in_source", "0/1",
     "1 when the job's script, config files or command line ask for mixed precision"),
    ("amp_source_read", "0/1",
     "1 when the job's script or config could be read to look for mixed precision"),
    ("forward_only", "0/1",
     "1 when the training thread ran forward passes and no backward or optimizer for a "
     "minute: serving or offline inference, not training; unknown while fewer than 8 "
     "forward samples were seen"),
    ("steps_seen", "0/1",
     "1 once the training thread has been seen taking a step since aitop attached (a batch "
     "fetched, a forward or backward pass, an evaluation pass, a collective) or its counter "
     "moved; 0 while it loads or sets up"),
    ("counter_moved", "0/1",
     "1 when the loop's step counter changed in the last 30 s (0 also with no counter)"),
    ("stalled_s", "s",
     "seconds the training thread's stack samples have all stood in one frame"),
    ("stall_cpu", "% of a core",
     "CPU of the job's processes over the stall's last 10 s (its whole length if shorter)"),
    ("stall_read", "MB/s",
     "bytes the job's processes read from storage over the stall's last 10 s"),
    ("free_cores_without_others", "cores",
     "cores the job could use if the processes outside it were gone"),
    ("runqueue_known", "0/1",
     "1 when the kernel's scheduler statistics (/proc/PID/schedstat) give how long the "
     "job's processes wait for a CPU"),
    ("proc_rss_growth", "MB/min",
     "target-tree memory growth judged on its floor: cut into cycles at each fall back and "
     "each change of DataLoader workers, the rise of the cycles' lowest points (Theil-Sen, "
     "out of their scatter) from 3 cycles on; before that a rise that never fell back, "
     "fitted over the last minute, 4 standard errors out of its swings (not while young "
     "workers may be re-created each epoch); unknown until then"),
    ("proc_rss_cycles", "",
     "cycles of the target tree's memory seen over the last ten minutes (falls back, and "
     "changes of the DataLoader's workers)"),
    ("ram_minutes_left", "min",
     "minutes until memory runs out at the floor's growth (proc_rss_growth): the room left "
     "under RAM, or the job's cgroup limit when that is tighter, at the top of the newest "
     "cycle"),
    ("workers_uss_growth", "MB/min",
     "growth of the DataLoader workers' private memory (USS, smaps_rollup), each worker's "
     "over the last minute, summed"),
    ("workers_copied_share", "fraction",
     "share of the workers' private-memory growth their RSS does not show: shared pages "
     "turned private (copy-on-read), not memory newly allocated"),
    ("workers_uss_mb", "MB", "private memory (USS) of the DataLoader workers, summed"),
    ("workers_shared_mb", "MB",
     "what the DataLoader workers still share (RSS less USS, summed): how much more "
     "copy-on-read could copy"),
    ("main_rss_growth", "MB/min",
     "growth of the training process's own resident memory over the last minute"),
    ("proc_pss_mb", "MB",
     "the job's memory with each shared page counted once (PSS of its processes, summed)"),
    ("cow_minutes_left", "min",
     "minutes until the memory the job may take (mem_free_mb) is used up at the workers' "
     "copying rate, where what they still share exceeds it; unknown where it does not"),
    ("shm_size_mb", "MB", "size of the job's /dev/shm (in its own mount namespace)"),
    ("shm_used", "%", "share of the job's /dev/shm in use"),
    ("shm_free_mb", "MB", "room left in the job's /dev/shm"),
    ("job_shm_mb", "MB",
     "bytes the job's processes map from /dev/shm: batches in flight between DataLoader "
     "workers and the training process"),
    ("cgroup_mem_free_mb", "MB",
     "headroom under the tightest cgroup memory limit over the job (limit less its working "
     "set); unknown when no cgroup limits it"),
    ("mem_free_mb", "MB",
     "memory the job may still take: free RAM, or its cgroup headroom when smaller"),
    ("gpu_count", "", "number of GPUs NVML sees"),
    ("gpu_target_devices", "", "GPUs on which the target tree has processes"),
    ("gpu_util_spread", "%", "utilisation gap between the busiest and idlest GPU the target uses"),
    ("gpu_mem_growth", "MB/min",
     "growth of the GPU memory the target tree's processes hold (NVML, all devices) over "
     "the last minute: its least-squares slope where that stands 4 standard errors out "
     "of the memory's swings, else 0 (none before 15 s)"),
    ("gpu_mem_free_mb", "MB", "memory free on the fullest GPU the target uses"),
    ("gpu_minutes_left", "min",
     "minutes until that GPU's memory runs out at the target's GPU memory growth"),
    ("gpu_throttle_thermal", "fraction", "share of the window with thermal clock slowdown"),
    ("gpu_throttle_power", "fraction", "share of the window with power-capped clocks"),
    *((f"phase_{p}", "fraction", f"share of the training thread's time in {p}") for p in PHASES),
    ("phase_compute", "fraction", "forward + backward + optimizer"),
    ("phase_device", "fraction",
     "forward + backward + optimizer, plus host-device sync when there is a GPU (the sync "
     "is the GPU finishing queued work): the time the accelerator's work sets the pace"),
    ("phase_eval_long", "fraction",
     "share of time in evaluation passes over the last 5 minutes (validation runs in bursts)"),
    ("phase_checkpoint_long", "fraction",
     "share of time in checkpoint saves over the last 5 minutes (saves are rare events)"),
    *((f"phase_{p}_long_error", "fraction",
       f"how far phase_{p}_long may be from the job's own share: twice its standard "
       "error across the stack windows, or one of its blocks as a share of the look "
       "if more (the phase comes in blocks a window cuts)")
      for p in ("eval", "checkpoint")),
    ("phase_samples", "samples", "stack samples behind the phase fractions"),
    ("stacks_age_s", "s",
     "seconds since the newest stack window ended: a rule over the phase shares fires only "
     "once a window that ended after its condition first held confirms it"),
    ("phase_optimizer_loop", "fraction",
     "share of the training thread's time in an optimizer's for-loop update "
     "(_single_tensor_adam, _single_tensor_sgd ...: one parameter tensor at a time)"),
    ("phase_recompute", "fraction",
     "share of the training thread's time in activation checkpointing's second forward "
     "pass, run inside backward (torch.utils.checkpoint)"),
    ("phase_parallel_compute", "fraction",
     "forward + backward + optimizer less the optimizer's for-loop update: the compute "
     "that more intra-op threads could run wider (the for-loop dispatches op by op on one "
     "core)"),
    ("uses_fused_optimizer", "0/1",
     "1 when the training thread ran a fused optimizer update (fused=True, apex, DeepSpeed)"),
    ("uses_foreach_optimizer", "0/1",
     "1 when the training thread ran the foreach optimizer update (_multi_tensor_*)"),
    ("optimizer_fusable", "0/1",
     "1 when the for-loop update seen is one of an optimizer with a fused implementation "
     "(Adam, AdamW, SGD: fused=True on CPU and CUDA)"),
    ("backward_per_step", "",
     "backward passes per optimizer step (gradient accumulation), counted in the order of "
     "the training thread's samples where the steps agree; unknown where passes are shorter "
     "than the sampling resolves"),
    ("last_backward_ratio", "x",
     "samples in the backward pass before each optimizer step over the mean of the step's "
     "other passes: about 1 when every pass does the same work (each all-reducing its "
     "gradients), above when the last alone does (the others inside no_sync())"),
    ("phase_compile_last", "fraction",
     "share of the newest stack window in torch.compile: whether compiling goes on now, "
     "where phase_compile still holds a compilation that has ended"),
    ("phase_compile_steady", "fraction",
     "share of the window in torch.compile outside the first compilation's stack windows "
     "(the first run of windows mostly compiling, and its tail): recompilation"),
    ("compile_warmup_share", "fraction",
     "share of the window's stack samples in the first compilation's windows: shares read "
     "before it is 0 describe the compilation"),
    ("compile_first_going_on", "0/1",
     "1 while the first compilation goes on: begun before any step was proven, not ended"),
    ("steps_proven", "0/1",
     "1 once the job has proven to take steps (backward passes in its stacks, a step counter "
     "that moved, dynamo recompiling): from then on it never warms up again"),
    ("compile_steady_samples", "samples",
     "stack samples phase_compile_steady was counted over"),
    ("recompiles_seen", "",
     "recompilations the job has made since it started, by the compile ids of the frames "
     "dynamo was seen recompiling (summed over frames)"),
    ("recompile_every_s", "s",
     "seconds between recompilations, from two sightings of a frame's compile id"),
    ("recompile_limit_hit", "0/1",
     "1 when the job's log says dynamo hit its recompile limit and runs a frame eagerly"),
    ("worker_restarts", "",
     "times in the window that new DataLoader workers replaced ones that had stopped (an "
     "epoch's start without persistent_workers); a floor where epochs are shorter than the "
     "process tree's interval"),
    ("worker_restart_every_s", "s", "mean seconds between those restarts: an epoch's length"),
    ("accel_util", "%",
     "GPU utilisation when there is a GPU; without one, the training thread's share of "
     "time in forward/backward/optimizer (compute then means the CPU)"),
    ("steps_per_s", "1/s",
     "training steps per second, from the loop counter, the DataLoader workers' batch index "
     "or the step the job prints to its log file"),
    ("step_time", "s", "seconds per training step"),
    ("cpu_headroom", "x",
     "CPUs the target may use / busy threads of the main process: how much wider CPU "
     "compute could go"),
    ("num_workers", "", "DataLoader worker processes"),
    ("free_cores", "cores",
     "CPU cores the job could still use: allowed cores minus the tree's CPU, and no more "
     "than the machine has idle"),
    ("compute_threads", "threads",
     "threads of the main process at work while the step computes (the training thread "
     "and the intra-op pool)"),
    ("threads_beside_worker", "threads",
     "compute threads that leave one core to a DataLoader worker (compute_threads - 1, "
     "at least 1)"),
    ("free_cores_in_compute", "cores",
     "cores free while the step computes (free_cores less what the job's compute "
     "threads hold then beyond their mean): what a new DataLoader worker would get"),
    ("free_cores_for_loading", "cores",
     "cores more loading would get: with DataLoader workers the cores free on average (a "
     "worker loads beside the whole step), without them those free while the step computes "
     "(loading moved out of the training thread leaves it computing)"),
    ("suggested_threads", "",
     "torch intra-op threads that match the cores the job gets (its CPU plus the free cores)"),
    ("suggested_workers", "",
     "DataLoader workers that would use the free cores (now + free cores / cores per worker)"),
    ("loading_capacity", "x",
     "how many times the batches more loading could make: the workers' cores and the cores "
     "free for loading over the workers' cores (without workers, the training thread's "
     "loading share moved onto them)"),
    ("data_from_queue", "0/1",
     "1 when the training thread's data waits are spent on a queue or pipe another thread "
     "or process fills (a hand-written prefetcher)"),
    ("data_in_own_code", "0/1",
     "1 when the data waits run the job's own code beneath the loop's fetch statement "
     "(a generator or iterator producing batches in the training thread)"),
    ("producer_busy", "fraction",
     "share of samples the busiest other thread of the target spent working, not waiting"),
    ("producer_cpu", "% of a core", "CPU of the busiest other thread of the target"),
    ("training_thread_cpu", "% of a core", "CPU of the training thread itself"),
    ("phase_other_idle", "fraction",
     "share of the training thread's time outside the phases that it cannot have spent on a "
     "CPU (phase_other less its whole CPU use): waiting in its own code, a sleep, a lock, "
     "another process; 0 when its CPU is unknown"),
    ("busy_python_threads", "threads",
     "Python threads besides the training thread keeping >= 10 % of a core busy (the rest of "
     "the main process's busy threads are native: intra-op compute)"),
    ("uses_lightning", "0/1", "1 when PyTorch Lightning's frames drive the loop"),
    ("uses_hf_trainer", "0/1", "1 when the Hugging Face Trainer drives the loop"),
    ("uses_accelerate", "0/1", "1 when Hugging Face Accelerate frames were seen"),
    ("pin_memory", "0/1", "1 when the pin-memory thread exists"),
    ("cpu_count", "",
     "CPUs the job may use: the least of its affinity, its cpuset and its cgroups' CPU quota"),
    ("has_cpu_quota", "0/1",
     "1 when every process of the job runs under a cgroup CPU quota (0 also where none "
     "could be read)"),
    ("cpu_quota", "CPUs",
     "CPUs the job's cgroup CPU quota allows (the tightest quota over each of its processes, "
     "summed over distinct groups); unknown where a process runs under none"),
    ("cpu_quota_period_ms", "ms", "the quota's period (CFS bandwidth control)"),
    ("cpuset_cpus", "", "CPUs the job's cpuset lets it run on"),
    ("cpu_throttled_share", "fraction",
     "share of the quota's periods in which it throttled the job's group (the increase of "
     "cpu.stat nr_throttled over nr_periods in the window)"),
    ("cpu_throttled_per_s", "s/s",
     "run-queue time the quota held the job's group back per second, summed over CPUs (the "
     "increase of cpu.stat's throttled time): 1.0 is a core's worth"),
    ("cpu_group_cpu", "cores",
     "CPU of every process in the job's quota group; unknown where the group's usage is not "
     "kept with its quota (cgroup v1 with cpuacct mounted apart)"),
    ("cpu_group_others", "cores",
     "CPU of the processes outside the job that share its quota group (spent from its quota)"),
    ("cpu_demand", "cores",
     "what the job would use without its quota: its CPU plus the time the quota held it back "
     "(its part of the group's), at most the CPUs it may run on"),
    ("quota_target", "CPUs",
     "the quota, in whole CPUs, that lets the job run what it wants (its demand and its "
     "group's other processes rounded up, at most its cpuset); unknown when no more would help"),
    ("quota_threads", "threads",
     "torch intra-op threads sized to the quota: its whole CPUs, at least one"),
    ("quota_workers", "",
     "DataLoader workers sized to the quota: its whole CPUs, at least one, at most the "
     "workers now"),
    ("local_ranks", "",
     "ranks of the target's job on this machine (1 for a single-process job, or when the "
     "job was not looked for, as in older recordings)"),
    ("job_ranks", "",
     "ranks of the target's job in all (its WORLD_SIZE): more than local_ranks when the "
     "others run on other machines, whether or not aitop watches them (1 for a single "
     "process)"),
    ("comm_hidden", "fraction",
     "share of wall time a CPU rank's training thread was blocked inside forward/backward/"
     "optimizer (neither running nor queued for a CPU): DDP's gradient all-reduce waiting for "
     "the other ranks; unknown on GPU ranks and single processes"),
    ("comm_share", "fraction",
     "share of wall time this rank communicates or waits for the other ranks: phase_comm plus "
     "comm_hidden"),
    ("comm_bound", "fraction",
     "the most of wall time communicating may cost this rank: comm_share, or on a CPU rank "
     "backward's share beyond forward's where that is more (the exchange's own CPU work, "
     "gloo's threads and DDP's bucket copies, shows as backward running longer)"),
    ("ranks_watched", "", "ranks of the job whose communication share is known"),
    ("job_comm_share", "fraction", "mean communication share over the watched ranks"),
    ("straggler_score", "",
     "the straggler's score: the fastest rank's own work per step over the straggler's (own "
     "work = time not waiting for other ranks); below the cut of the named condition "
     "holds_back_job (rules.yaml) it holds the others back"),
    ("straggler_rank_comm", "fraction", "the straggler's own communication share"),
    ("job_wait_share", "fraction",
     "mean communication share of the ranks other than the straggler"),
    ("straggler_excess", "fraction",
     "what the other ranks wait beyond what the straggler waits itself: their time lost to it"),
    ("straggler_stalled", "0/1",
     "1 when the straggler's own state is stalled (it stands still while the others wait)"),
    ("waits_for_straggler", "0/1",
     "1 when the job's judgement names a straggler that holds the job back and it is "
     "another rank than this one: this rank's wait is that rank's doing"),
    ("network_fs", "0/1", "1 when some of the target's files are on a network filesystem"),
    ("scheduler_ok", "0/1",
     "1 when the disks behind the target's files use the 'none' or 'mq-deadline' scheduler"),
    ("checkpoint_writing", "0/1", "1 when the target has files open for writing"),
    ("uses_compile", "0/1", "1 when torch.compile frames were seen"),
    ("uses_amp", "0/1", "1 when autocast/GradScaler frames were seen"),
    ("uses_grad_checkpointing", "0/1", "1 when torch.utils.checkpoint frames were seen"),
    ("target_alive", "0/1", "1 while the target process runs"),
    ("watched_s", "s", "seconds since aitop's first sample of the job"),
    ("window_s", "s", "length of the evaluation window"),
)



#: Names (not numbers) a rule's text may use: filled by :func:`compute_words`.
WORDS: frozenset[str] = frozenset({
    "producer", "producer_frame", "data_source", "other_frame",
    # The job-level judgement of a multi-rank job (knowledge/metrics/straggler.py).
    "straggler", "straggler_cause", "straggler_action",
    # How long a job state (warming up) has held: filled by the Diagnoser.
    "state_seen",
    # The busiest processes outside the job, with PID, command and cores.
    "neighbours",
    # The processes outside the job on its GPUs, with PID, name, SM share, memory.
    "gpu_neighbours",
    # The frame a stalled training thread stands in, and for how long ("at
    # least 40 s" when the stall began before aitop attached).
    "stalled_frame", "stalled_for",
    # What became of the threads that worked beside a stalled loop: a sentence
    # naming one that has exited or idles, or "" (knowledge/metrics/stall_feeder.py).
    "stall_feeder",
    # What the job runs out of first: "RAM" or its cgroup's limit.
    "memory_limit",
    # Each DataLoader worker's private memory and growth, and the training
    # process's RSS and growth (knowledge/metrics/private_memory.py).
    "worker_memory",
    # What a compile-phase warm-up is doing: torch.compile compiling, or CUDA
    # graphs being captured.
    "warmup_work",
    # What dynamo recompiles ("forward (model.py:12)", else "the model called
    # at train.py:42", else "the model"); how
    # many times and how often, the guard that failed last, and the function it
    # gave up on at its limit: each a sentence, or "" (knowledge/metrics/compiling.py).
    "recompile_frame", "recompile_count", "recompile_guard", "recompile_limit",
    # The optimizer's for-loop update the training thread runs most
    # ("_single_tensor_adam (torch/optim/adam.py)").
    "optimizer_loop_frame",
    # The cgroup whose CPU quota binds the job ("/kubepods/burstable/pod7/ctr").
    "quota_group",
})


def catalogue() -> dict[str, MetricSpec]:
    """Every metric name a rule may use."""
    specs: dict[str, MetricSpec] = {}
    for name, unit, desc in SERIES:
        for agg in AGGREGATES:
            full = f"{name}_{agg}"
            specs[full] = MetricSpec(full, unit + ("/min" if agg == "trend" else ""), desc, True)
    for name, unit, desc in SCALARS:
        specs[name] = MetricSpec(name, unit, desc, False)
    return specs


CATALOGUE = catalogue()
