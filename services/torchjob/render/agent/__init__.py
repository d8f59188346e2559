"""The programs torchjob runs inside a replica's pod, on the training container's own image and
Python: the restart agent (restart_agent.py) and the diagnosis hook it installs in the training
processes (diagnosis_hook.py). They import nothing but the standard library of any Python 3.8 or
later, since they run where torchjob is not installed; render/in_place.py and
render/diagnosis.py put their source into the pod."""
