"""The GPU path of the diffusion decoder: Triton kernels, their torch references, CUDA graphs.

Everything here is optional at run time: without CUDA (or Triton) each function runs its
plain-torch reference with the same semantics. Nothing here knows about models.
"""

from kernels.block_attention import block_attention, block_causal_attention
from kernels.confidence import confidence_and_token, select_confident
from kernels.cuda_graphs import GraphedCallable, capture
from kernels.dispatch import kernel_path, triton_available
from kernels.rotary import apply_rotary

__all__ = [
    "GraphedCallable",
    "apply_rotary",
    "block_attention",
    "block_causal_attention",
    "capture",
    "confidence_and_token",
    "kernel_path",
    "select_confident",
    "triton_available",
]
