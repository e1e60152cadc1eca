"""Jobs on this machine: local clusters, the supervision of their processes, emulated hosts.

`launcher`: a parameter-server cluster or Horovod ranks (the library behind
`python -m deepfm.launch`); `processes`: every task of a job started,
watched and stopped together; `hosts`: emulated hosts in network namespaces,
each started by `host_init` as its init; `memory`: a memory cgroup per
host, its limit, peak and OOM kills. Nothing here imports TensorFlow.
"""
