import os

import torch

# Without a GPU the kernels run in Triton's interpreter, which must be chosen before a kernel
# module is imported (triton.jit reads it at decoration time).
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
