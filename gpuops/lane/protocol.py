"""What the startup script writes and the lane's decisions read: the job's stages, in order,
and the first word of the results manifest (``gpuops-manifest <attempt> <count>``).

Apart from script.py, which renders (writing these words) and lints the script and loads the bash
parser: reading the board and deciding from it import only these words.
"""

STAGES = ("booted", "preflight", "fetching", "running", "uploading", "succeeded", "failed")
MANIFEST_HEADER = "gpuops-manifest"
