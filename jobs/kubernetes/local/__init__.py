"""A rendered TFJob, MPIJob or JobSet run on this machine the way its operator runs it (`deepfm.kubernetes local`).

`run`: the run itself (`run(config)`, `LocalConfig`, `JobFailedError`): one
emulated host per pod, restarts and elastic resizes as the operators make
them; `operator`: the interface of an operator (the pods it makes, what it
does when one exits) and `tfjob`, `mpijob`, `jobset`: one operator each;
`pod`: a pod as an operator creates it; `faults`: failures injected once the
checkpoints reach a step. Nothing here imports TensorFlow.
"""
