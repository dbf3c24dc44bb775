"""The training-container runtime: runs one host's share of a training job.

`train` (console script, or ``python -m training_runtime``) reads a job root,
sets the environment of every platform family (TI-ONE ``TM_*``, PAI ``PAI_*``,
SageMaker ``SM_*``, ModelArts ``MA_*``), installs ``code/requirements.txt`` into a
job-private virtual environment, runs the user's entry point or command and
records the outcome in ``output/success`` or ``output/failure``.

The package uses the standard library only (Python >= 3.9) and never imports
Airflow; the Airflow side imports :mod:`training_runtime.layouts` and
:mod:`training_runtime.config` to write job roots the runtime reads.

Exit codes of ``train``
-----------------------
====  =====================================================================
0     success; ``output/success`` written
1     the user code failed; its own exit code and the last lines of its
      stderr are in ``output/failure`` (unless the user wrote that file)
2     the job was refused before anything ran: missing or malformed config
      file, entry point missing, clashing or empty hyperparameter names, bad
      channel names, current host not in hosts, unknown layout
3     installing ``code/requirements.txt`` failed (pip's last lines are in
      ``output/failure``)
4     platform/internal error of the runtime itself, or a host of a
      multi-host job that never resolved (retryable)
5     the job ran past ``--max-run-seconds`` and ``train`` stopped it
      (SIGTERM, then SIGKILL): the timeout class
137   the user code was killed by SIGKILL (the OOM killer), or failed after
      the OOM killer killed one of its processes: the OOM class
128+n ``train`` was stopped by signal n (SIGTERM/SIGINT are forwarded to the
      user code first); ``output/failure`` says so
====  =====================================================================

1-3 are user errors (retrying will not help), 4 and 128+n may be retried,
137 needs more memory (:func:`training_runtime.errors.failure_class`).
"""

__version__ = "0.1.0"
