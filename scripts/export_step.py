"""Export a trained Aaren backbone's step (state as explicit inputs and outputs) to ONNX and check it.

python scripts/export_step.py outputs/tsf/etth1/aaren/cpu/seed1 --out aaren_step.onnx
python scripts/export_step.py            # an untrained demo backbone (d_model 128, 4 heads, 2 layers)
Needs the deploy extra: pip install -e ".[deploy]".
"""

import sys

from recurrent_attention.cli.export_step import main

if __name__ == "__main__":
    sys.exit(main())
