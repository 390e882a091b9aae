"""The one door to the files the kernel serves: ``/proc`` and ``/sys/fs/cgroup``.

Every read aitop makes there goes through this package, so a file's format is
learnt once, its absence blanks one field (nothing here raises for a missing or
unreadable file, or a process that exits between two reads), and tests point the
whole of it at a fake tree (``proc_root``, ``cgroup_root``; the builder is
``tests/support/kernel_tree.py``). ``tests/quality/test_kernel_door.py`` fails on a
``/proc`` or ``/sys/fs/cgroup`` path built anywhere else in the product. psutil
still reads ``/proc`` for itself.

* ``procfs``: a process's files (stat, status, environ, cmdline, maps, fds, task
  listings, namespace and exe links) and the machine's (diskstats, mounts);
* ``process_files``: a job's own files, read through ``/proc/PID/root`` or
  ``/proc/PID/fd/N``, bounded in size and never blocking;
* ``smaps``: a process's memory by kind (``smaps_rollup``: RSS, PSS, USS, swap);
* ``cgroups``: ``/proc/PID/cgroup`` and the group's limits and counters in
  ``/sys/fs/cgroup``, cgroup v1, v2 and the hybrid of both.
"""
