"""What the app needs from the machine it runs on: processes and their BPF programs, running a metric as
root, the preflight check, heap trimming and the kernel's bpf_stats."""
