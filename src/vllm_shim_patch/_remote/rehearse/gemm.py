"""The GEMM stand-in: a 16-bit model's linear layers computed in float64 and rounded once.

Every release's unquantized linear layer ends in `torch.nn.functional.linear(x, weight, bias)`
(vLLM's default_unquantized_gemm, and cuda_unquantized_gemm off a GPU), looked up when called. On
a CPU without AVX512-BF16, torch's bfloat16 GEMM is about 10x slower than a float64 one of the same
shape (a 2,048 x 64 by 64 x 128 product: 15 ms against 1.4 ms, one thread): a fifth of a
rehearsal's time. The stand-in multiplies in float64 and rounds the sum once to the model's dtype,
as a GPU's GEMM rounds its wide accumulator once. A product of two bfloat16 numbers is exact in
float64 and a row's sum does not depend on the rows beside it, so a batched forward and a prompt's
forward alone agree bit for bit, as the per-sequence check needs; the self-check compares it with
torch's own linear. Only 16-bit inputs of one dtype are taken: anything else (float32, mixed
dtypes, which torch refuses) goes to torch's linear as it is.
"""

STOOD_IN = ("torch.nn.functional.linear on bfloat16/float16 inputs (vLLM's linear layers): the product and "
            "bias in float64, rounded once to the model's dtype (torch's 16-bit CPU GEMM is ~10x slower "
            "without AVX512-BF16; a GPU's GEMM also rounds its wide sum once)")

_REAL: dict = {}


def install():
    import torch
    import torch.nn.functional as F

    if "linear" in _REAL:
        return
    real = _REAL["linear"] = F.linear
    narrow = (torch.bfloat16, torch.float16)

    def linear(input, weight, bias=None):
        dtype = input.dtype
        if dtype in narrow and weight.dtype == dtype and (bias is None or bias.dtype == dtype):
            wide = real(input.double(), weight.double(), None if bias is None else bias.double())
            return wide.to(dtype)
        return real(input, weight, bias)

    F.linear = linear


def self_check(run):
    """Against torch's own bfloat16 linear: within one unit in the last place; and a row's result
    the same alone as among others."""
    import torch
    import torch.nn.functional as F

    real = _REAL.get("linear")
    if real is None:
        return
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(37, 64, generator=gen).to(torch.bfloat16)
    w = (torch.rand(48, 64, generator=gen) * 0.6 - 0.3).to(torch.bfloat16)
    b = torch.randn(48, generator=gen).to(torch.bfloat16)
    ours, theirs = F.linear(x, w, b).float(), real(x, w, b).float()
    # One bfloat16 unit in the last place: 2^-7 of the value's power of two.
    ulp = torch.exp2(torch.floor(torch.log2(theirs.abs().clamp_min(1e-30))) - 7)
    worst = float(((ours - theirs).abs() / ulp).max())
    run.check("GEMM stand-in vs torch.nn.functional.linear", worst <= 1.0,
              f"differs from torch's bfloat16 linear by {worst:.1f} units in the last place")
    alone = F.linear(x[5:9], w, b)
    run.check("GEMM stand-in rows alone vs in a batch", torch.equal(alone, F.linear(x, w, b)[5:9]),
              "a row's product changed with the rows beside it")
