#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Where the threads of a job's ranks run, sampled from /proc while it runs (an experiment
# beside fleetq, not part of it): every INTERVAL seconds, for each process in
# PARENT/nodeI/cgroup.procs (detect.sh's layout, one rank a cgroup) and each of its threads,
# the CPU it last ran on, its CPU time and its run-queue wait (schedstat); and each CPU's
# times from /proc/stat (node "cpu", tid the CPU: user+system ticks, steal, irq+softirq,
# idle in the columns ticks, run_ns, wait_ns, slices). Writes OUT (TSV, gzip) until killed,
# with the machine's NUMA nodes and each GPU's node in OUT's header lines ("# ...").
# usage: placement.py PARENT OUT.tsv.gz [INTERVAL]
import glob, gzip, os, signal, sys, time

parent, out = sys.argv[1], sys.argv[2]
interval = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
stop = [False]
signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


with gzip.open(out, "wt") as f:
    for d in sorted(glob.glob("/sys/devices/system/node/node[0-9]*")):
        f.write("# numa %s cpus %s\n" % (os.path.basename(d)[4:], read(d + "/cpulist").strip()))
    for d in sorted(glob.glob("/sys/bus/pci/devices/*")):
        if read(d + "/vendor").strip() == "0x10de" and read(d + "/class").startswith("0x0302"):
            f.write("# gpu %s numa %s cpus %s\n" % (os.path.basename(d), read(d + "/numa_node").strip(),
                                                  read(d + "/local_cpulist").strip()))
    f.write("t_ns\tnode\tpid\ttid\tcomm\tcpu\tticks\trun_ns\twait_ns\tslices\n")
    while not stop[0]:
        t = time.time_ns()
        for cg in sorted(glob.glob(os.path.join(parent, "node[0-9]*"))):
            node = cg.rsplit("node", 1)[1]
            for pid in read(cg + "/cgroup.procs").split():
                for td in glob.glob("/proc/%s/task/*" % pid):
                    st = read(td + "/stat")
                    if not st:
                        continue
                    comm = st[st.index("(") + 1:st.rindex(")")].replace("\t", " ").replace(" ", "_")
                    v = st[st.rindex(")") + 2:].split()
                    # fields after comm: state is v[0]; utime v[11], stime v[12], processor v[36]
                    ss = read(td + "/schedstat").split() or ["0", "0", "0"]
                    f.write("%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n" % (
                        t, node, pid, os.path.basename(td), comm, v[36],
                        int(v[11]) + int(v[12]), ss[0], ss[1], ss[2]))
        for line in read("/proc/stat").splitlines():
            v = line.split()
            if v and v[0].startswith("cpu") and v[0] != "cpu":
                # user nice system idle iowait irq softirq steal
                f.write("%d\tcpu\t-1\t%s\tcpu\t%s\t%d\t%s\t%d\t%s\n" % (
                    t, v[0][3:], v[0][3:], int(v[1]) + int(v[2]) + int(v[3]), v[8],
                    int(v[6]) + int(v[7]), v[4]))
        time.sleep(max(0.0, interval - (time.time_ns() - t) / 1e9))
